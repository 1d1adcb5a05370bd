import { type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { FAULT_TOPIC } from './fixtures/fault-config';
import { faultBackends } from './fixtures/fault-backends';
import { auditOutbox, epochMs, faultScenarios, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const EVENTS = 400;
const DELAY_MS = 3000;
const TEN_MINUTES = 10 * 60_000;

const openScenario = faultScenarios();

describe.each(faultBackends())('clock skew on %s', (backend: BackendName) => {
  it('workers whose clocks run 10 minutes ahead and behind: no early delivery, no stolen lease', async () => {
    const { app, fleet } = await openScenario(
      backend,
      {
        worker: { pollIntervalMs: 50, batchSize: 20, concurrency: 5, leaseMs: 5000 },
        maxAttempts: 3,
        handlerMs: 10,
      },
      { preload: ['test/faults/fixtures/skewed-clock.js'] },
    );
    const started = Date.now();
    const workers = [
      ...(await fleet.start(1, { OUTBOX_CLOCK_SKEW_MS: String(TEN_MINUTES) })),
      ...(await fleet.start(1, { OUTBOX_CLOCK_SKEW_MS: String(-TEN_MINUTES) })),
    ];
    // The skew took effect: each worker's wall clock is 10 minutes off ours.
    const offsets = await Promise.all(
      workers.map(async (w) => Number((await w.waitFor(/^CLOCK \d+$/)).split(' ')[1]) - started),
    );
    expect(offsets[0]).toBeGreaterThan(TEN_MINUTES - 60_000);
    expect(offsets[1]).toBeLessThan(-TEN_MINUTES + 60_000);

    // Half the events are due now, half in 3 s (by the database's clock).
    const ids: string[] = [];
    const delayed = new Set<string>();
    for (let start = 0; start < EVENTS; start += 50) {
      const results = await app.txHost.withTransaction(() =>
        app.outbox.publishMany(
          Array.from({ length: 50 }, (_, i) => ({
            topic: FAULT_TOPIC,
            payload: { n: start + i },
            ...((start + i) % 2 === 1 ? { delayMs: DELAY_MS } : {}),
          })),
        ),
      );
      results.forEach((r, i) => {
        ids.push(r.id);
        if ((start + i) % 2 === 1) delayed.add(r.id);
      });
    }
    await eventually(
      async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === EVENTS,
      60_000,
      'all delivered',
    );
    const drainMs = Date.now() - started;
    await fleet.stop();

    // Exactly once, each on its first attempt: nobody took a lease that was still live.
    const result = await auditOutbox(backend, app.table, app.sqlitePath, {
      ids,
      maxAttempts: 3,
      killedPids: fleet.killedPids,
    });
    record({
      scenario: 'clock skew ±10 min, 2 workers',
      backend,
      events: EVENTS,
      kills: 0,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });
    expect(result).toMatchObject({ delivered: EVENTS, lost: 0, duplicates: { killed: 0, leaseExpired: 0 } });
    const [{ n }] = await app.raw.query<{ n: number }>(
      `SELECT count(*) AS "n" FROM "${app.table}" WHERE "attempts" <> 1`,
    );
    expect(Number(n)).toBe(0);

    // No delayed event started before it was due, by the database's clock.
    const rows = await app.raw.query<{ id: string; created_at: unknown }>(
      `SELECT "id", "created_at" FROM "${app.table}"`,
    );
    const createdAt = new Map(rows.map((r) => [String(r.id), epochMs(r.created_at)]));
    const starts = await app.raw.query<{ event_id: string; at: unknown; pid: number }>(
      `SELECT "event_id", "at", "pid" FROM "${app.table}_log" WHERE "phase" = 'start'`,
    );
    const early = starts.filter(
      (s) => delayed.has(s.event_id) && epochMs(s.at) < createdAt.get(s.event_id)! + DELAY_MS,
    );
    expect(early).toEqual([]);
    // Both clocks took part.
    expect(new Set(starts.map((s) => Number(s.pid)))).toEqual(new Set(workers.map((w) => w.process.pid)));
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
