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
});
