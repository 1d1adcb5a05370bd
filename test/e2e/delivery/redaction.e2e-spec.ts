import { Registry } from 'prom-client';
import {
  OutboxEvents,
  OutboxHealthIndicator,
  OutboxOperations,
  OutboxTesting,
  type OutboxLifecycleEvent,
  type OutboxTransport,
} from '../../../lib';
import { backends } from '../../fixtures/backends';
import { errorPlaces, leaks } from '../../fixtures/secrets';
import { outboxRows } from '../../fixtures/test-app';
import { registerTracing } from '../../fixtures/tracing';
import { workerApps } from '../../fixtures/worker-app';

describe.each(backends())('secrets in errors on %s', (backend) => {
  const start = workerApps(backend);

  it("keeps a handler error's secrets, and what the app's redactError hides, out of logs, rows, history, events and failure groups", async () => {
    const { app, b, publish, row } = await start({
      retry: { maxAttempts: 2, initialDelayMs: 0, maxDelayMs: 0 },
      // What only the application knows: its tenant's internal name.
      redactError: (text) => text.replaceAll('acme-internal-42', '<tenant>'),
    });
    const watch = errorPlaces(app);
    b.leak =
      'cannot reach postgres://pguser-x1:pg-s3cret@db.internal:5432/orders (token=tk-998877, ' +
      '{"apiKey":"ak-123456","region":"eu"}) for tenant acme-internal-42';
    const { id } = await publish('leaks');
    expect(await app.worker.drain()).toMatchObject({ failed: 1, deadLettered: 1 });
    const expected =
      'Handlers.leaks: Error: cannot reach postgres://[redacted]@db.internal:5432/orders (token=[redacted], ' +
      '{"apiKey":"[redacted]","region":"eu"}) for tenant <tenant>';
    expect(await row(id)).toMatchObject({ status: 'dead', last_error: expected });
    // Each place was reached: the text is there, redacted.
    const places = await watch.places();
    for (const text of Object.values(places)) expect(text).toContain('db.internal:5432/orders');
    expect(watch.emitted.map((e) => e.type)).toEqual(
      expect.arrayContaining(['handler.failed', 'retry.scheduled', 'dead-lettered']),
    );
    expect(leaks(places, ['pguser-x1', 'pg-s3cret', 'tk-998877', 'ak-123456', 'acme-internal-42'])).toEqual([]);
  });

  /** What only the application knows, hidden by its redactError, and what the outbox hides itself. */
  const tenantHidden = (text: string) => text.replaceAll('acme-internal-42', '<tenant>');
  const leak =
    'cannot reach postgres://audit-x2:au-s3cret@db.internal/audit (Authorization: Bearer tk-445566) for acme-internal-42';
  const leakRedacted =
    'Error: cannot reach postgres://[redacted]@db.internal/audit (Authorization: [redacted]) for <tenant>';
  const secrets = ['audit-x2', 'au-s3cret', 'tk-445566', 'acme-internal-42'];

  it("logs a lifecycle subscriber's failure redacted, the app's redactError applied", async () => {
    const { app, publish } = await start({ redactError: tenantHidden });
    const subscription = app.module.get(OutboxEvents).events$.subscribe(() => {
      throw new Error(leak);
    });
    await publish('plain');
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    subscription.unsubscribe();
    const failures = app.logger.lines.filter((line) => line.context === 'OutboxEvents');
    expect(failures.length).toBeGreaterThan(0);
    for (const { message } of failures) {
      expect(message).toBe(`An OutboxEvents subscriber failed (delivery goes on): ${leakRedacted}`);
    }
    expect(leaks({ logs: JSON.stringify(app.logger.lines) }, secrets)).toEqual([]);
  });

  it("logs a transport's failure to stop redacted, the app's redactError applied", async () => {
    const transport: OutboxTransport = {
      name: 'audit',
      send: () => Promise.resolve(),
      beforeApplicationShutdown: () => Promise.reject(new Error(leak)),
    };
    const { app } = await start({ transports: [transport], redactError: tenantHidden });
    await app.close();
    expect(app.logger.lines.filter((line) => line.context === 'OutboxTransports')).toEqual([
      expect.objectContaining({ level: 'error', message: `Outbox transport audit failed to stop: ${leakRedacted}` }),
    ]);
    expect(leaks({ logs: JSON.stringify(app.logger.lines) }, secrets)).toEqual([]);
  });

  it('keeps them out of every sink that reports an error: logs, rows, events, failure groups, spans, health, operations', async () => {
    const tracing = registerTracing();
    try {
      const transport: OutboxTransport = {
        name: 'audit',
        send: () => Promise.reject(new Error(leak)),
        beforeApplicationShutdown: () => Promise.reject(new Error(leak)),
      };
      const registry = new Registry();
      const { app, b, publish, store } = await start({
        retry: { maxAttempts: 2, initialDelayMs: 0, maxDelayMs: 0 },
        transports: [transport],
        routes: [{ topic: 'routed', transport: 'audit' }],
        metrics: { prometheus: registry },
        redactError: tenantHidden,
      });
      const emitted: OutboxLifecycleEvent[] = [];
      const events = app.module.get(OutboxEvents);
      const watching = events.events$.subscribe((event) => emitted.push(event));
      const throwing = events.events$.subscribe(() => {
        throw new Error(leak);
      });
      b.leak = leak;
      await publish('leaks');
      await publish('routed');
      // A row whose headers a parser cannot read: its error quotes them, the tenant's name.
      const { id: unreadable } = await publish('plain');
      const value = app.backend === 'postgres' ? 'to_jsonb(CAST(? AS text))' : '?';
      await app.raw.query(`UPDATE "${app.table}" SET "headers" = ${value} WHERE "id" = ?`, [
        'acme-internal-42',
        unreadable,
      ]);

      const operations = app.module.get(OutboxOperations);
      const read = { get: await operations.get(unreadable), find: await operations.find() };
      // A claim that fails, then the deliveries: the handler and the route fail twice, the row is unreadable.
      jest.spyOn(store, 'claim').mockRejectedValueOnce(new Error(leak));
      expect(await app.worker.drain()).toMatchObject({ deadLettered: 0 });
      expect(await app.worker.drain()).toMatchObject({ failed: 2, deadLettered: 3 });
      // The database failing with the error under health checks and a metrics scrape.
      const failing = jest.spyOn(store.executor, 'run').mockRejectedValue(new Error(leak));
      const health = app.module.get(OutboxHealthIndicator);
      const checks = { healthy: await health.isHealthy(), state: await health.checkState() };
      await registry.metrics();
      failing.mockRestore();
      const failureGroups = await operations.failureGroups();
      watching.unsubscribe();
      throwing.unsubscribe();
      await app.close();

      const rows = (await outboxRows(app)).map((row) => ({ error: row.last_error, history: row.attempt_log }));
      const logs = app.logger.lines.filter((line) => line.context?.startsWith('Outbox'));
      const places: Record<string, string> = {
        rows: JSON.stringify(rows),
        events: JSON.stringify(emitted),
        failureGroups: JSON.stringify(failureGroups),
        spans: JSON.stringify(tracing.spans().map((span) => ({ status: span.status, events: span.events }))),
        health: JSON.stringify(checks),
        operations: JSON.stringify(read),
      };
      for (const context of ['OutboxWorker', 'OutboxEvents', 'OutboxTransports', 'OutboxMetrics']) {
        places[context] = JSON.stringify(logs.filter((line) => line.context === context));
      }
      // Each place reported the error: its harmless part is there, and the tenant's name hidden.
      for (const [place, text] of Object.entries(places)) {
        if (place === 'operations') expect(text).toContain('cannot be decoded: SyntaxError: Unexpected token');
        else expect({ place, reported: text.includes('db.internal/audit') }).toEqual({ place, reported: true });
      }
      expect(leaks({ ...places, logs: JSON.stringify(logs) }, secrets)).toEqual([]);
      expect(places.rows).toContain('cannot be decoded (SyntaxError: Unexpected token');
      expect(places.operations).toContain('<tenant>');
      expect(places.OutboxWorker).toContain('Outbox claim failed');
      expect(places.spans).toContain('exception');
    } finally {
      await tracing.close();
    }
  });

  it("writes a handler's error in OutboxTesting's records as everywhere else", async () => {
    const { app, b, publish } = await start(
      { redactError: tenantHidden },
      { build: (builder) => OutboxTesting.override(builder) },
    );
    b.leak = leak;
    await publish('leaks');
    const outbox = OutboxTesting.from(app.module);
    await outbox.drain();
    expect(outbox.failed('leaks').map((call) => call.error)).toEqual([leakRedacted, leakRedacted, leakRedacted]);
    expect(outbox.deadLettered('leaks').map((event) => event.error)).toEqual([`Handlers.leaks: ${leakRedacted}`]);
  });
});
