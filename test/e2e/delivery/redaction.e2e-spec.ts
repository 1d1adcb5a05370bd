import { OutboxEvents, type OutboxTransport } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { errorPlaces, leaks } from '../../fixtures/secrets';
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
});
