import { type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { faultBackends } from './fixtures/fault-backends';
import { auditOutbox, faultScenarios, publishEvents, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const EVENTS = 600;
const MAX_ATTEMPTS = 3;

const openScenario = faultScenarios();

describe.each(faultBackends())('poison message on %s', (backend: BackendName) => {
  it('a handler that ends the process on one message every time: that message is dead-lettered after maxAttempts, every other delivered', async () => {
    const { app, fleet } = await openScenario(
      backend,
      {
        worker: { pollIntervalMs: 100, batchSize: 25, concurrency: 5, leaseMs: 1500, handlerTimeoutMs: 1000 },
        maxAttempts: MAX_ATTEMPTS,
        handlerMs: 5,
      },
      { restart: true },
    );
    const started = Date.now();
    await fleet.start(3);
    // The poison sits in the middle of the stream, so it is always claimed with batch-mates.
    const poisonAt = EVENTS / 2;
    const ids = await publishEvents(app, EVENTS, 50, (n) => (n === poisonAt ? { n, poison: true } : { n }));
    const poison = ids[poisonAt];

    await eventually(
      async () => {
        const counts = await statusCounts(backend, app.table, app.sqlitePath);
        return counts.delivered + counts.dead === EVENTS;
      },
      120_000,
      'every event delivered or dead-lettered',
    );
    const drainMs = Date.now() - started;
    await fleet.stop();

    const result = await auditOutbox(backend, app.table, app.sqlitePath, {
      ids,
      maxAttempts: MAX_ATTEMPTS,
      dead: [poison],
      killedPids: fleet.killedPids,
    });
    record({
      scenario: 'poison (ends its process)',
      backend,
      events: EVENTS,
      kills: fleet.kills,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });

    expect(result).toMatchObject({ delivered: EVENTS - 1, dead: 1, lost: 0 });
    // It took down one process per attempt, and nothing else did.
    expect(fleet.kills).toBe(MAX_ATTEMPTS);
    expect(fleet.selfKills.map((k) => [k.point, k.id, k.attempt])).toEqual(
      Array.from({ length: MAX_ATTEMPTS }, (_, i) => ['poison', poison, i + 1]),
    );
    const [row] = await app.raw.query<{ attempts: number; note: string }>(
      `SELECT "attempts", "note" FROM "${app.table}" WHERE "id" = ?`,
      [poison],
    );
    expect(Number(row.attempts)).toBe(MAX_ATTEMPTS);
    expect(row.note).toMatch(
      new RegExp(`^attempt ${MAX_ATTEMPTS} of ${MAX_ATTEMPTS} did not finish before its lease expired`),
    );
    // Its batch-mates lost one attempt to the first crash at most: after it, the poison ran alone.
    const [{ worst }] = await app.raw.query<{ worst: number }>(
      `SELECT max("attempts") AS "worst" FROM "${app.table}" WHERE "id" <> ?`,
      [poison],
    );
    expect(Number(worst)).toBeLessThanOrEqual(2);
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
