import { rawDb, type BackendName } from '../fixtures/backends';
import { faultBackends } from './fixtures/fault-backends';
import { KILL_POINTS } from './fixtures/fault-config';
import { auditOutbox, epochMs, faultScenarios, publishEvents } from './fixtures/harness';
import { KillSchedule } from './fixtures/kill-schedule';
import { runProblems } from './fixtures/run-order';
import { record } from './fixtures/report';

const KEYS = Number(process.env.OUTBOX_FAULT_ORDERED_KEYS ?? 200);
const PER_KEY = Number(process.env.OUTBOX_FAULT_ORDERED_PER_KEY ?? 50);
const MIN_KILLS = Number(process.env.OUTBOX_FAULT_ORDERED_KILLS ?? 12);
/**
 * Acknowledged by run: few keys, so that claims find fewer fronts than lanes and take runs behind them
 * (4 workers × 8 lanes), long ones.
 */
const RUN_KEYS = Number(process.env.OUTBOX_FAULT_RUN_KEYS ?? 8);
const RUN_PER_KEY = Number(process.env.OUTBOX_FAULT_RUN_PER_KEY ?? 250);
const MAX_ATTEMPTS = 20;
const FAIL_RATE = 0.2;
const DRAIN_TIMEOUT_MS = 240_000;

const openScenario = faultScenarios();

interface LogEntry {
  eventId: string;
  attempt: number;
  phase: string;
  at: number;
}

/**
 * Per key, from the attempt log (the database's clock): no attempt of an event starts before every
 * attempt of the key's previous event has logged its last line (so the previous one was delivered,
 * and a duplicate of it, after a kill, came before the next event too); attempts never overlap; and the
 * key's numbers follow its publish order (one publisher, so publish order is commit order).
 */
async function auditKeyOrder(
  backend: BackendName,
  table: string,
  sqlitePath: string | undefined,
  ids: string[],
  byRun: boolean,
) {
  const db = await rawDb(backend, sqlitePath);
  try {
    const rows = await db.query<{ id: string; key: string; seq: unknown; processed_at: unknown }>(
      `SELECT "id", "key", "seq", "processed_at" FROM "${table}"`,
    );
    const log = await db.query<{ event_id: string; attempt: number; phase: string; at: unknown }>(
      `SELECT "event_id", "attempt", "phase", "at" FROM "${table}_log"`,
    );
    const entries = new Map<string, LogEntry[]>();
    for (const e of log) {
      const list = entries.get(e.event_id) ?? [];
      list.push({ eventId: e.event_id, attempt: Number(e.attempt), phase: e.phase, at: epochMs(e.at) });
      entries.set(e.event_id, list);
    }
    const published = new Map(ids.map((id, n) => [id, n]));
    const byKey = new Map<string, Array<{ id: string; seq: number; ackedAt: number }>>();
    for (const row of rows) {
      const list = byKey.get(row.key) ?? [];
      list.push({ id: String(row.id), seq: Number(row.seq), ackedAt: epochMs(row.processed_at) });
      byKey.set(row.key, list);
    }
    const problems: string[] = [];
    for (const [key, events] of byKey) {
      events.sort((a, b) => a.seq - b.seq);
      const order = events.map((e) => published.get(e.id)!);
      if (order.some((n, i) => i > 0 && n < order[i - 1])) problems.push(`${key}: numbered out of publish order`);
      if (byRun) {
        const unread = events.find((e) => Number.isNaN(e.ackedAt));
        if (unread) throw new Error(`${key}: the acknowledgement time of ${unread.id} could not be read`);
        const starts = (id: string) => (entries.get(id) ?? []).filter((e) => e.phase === 'start').map((e) => e.at);
        problems.push(
          ...runProblems(
            key,
            events.map((e) => ({ starts: starts(e.id), ackedAt: e.ackedAt })),
          ),
        );
      }
      // Acknowledged by event: a key's event starts only once the one before it is done with.
      for (let i = 1; i < events.length && !byRun; i++) {
        const before = entries.get(events[i - 1].id) ?? [];
        const starts = (entries.get(events[i].id) ?? []).filter((e) => e.phase === 'start');
        const lastBefore = Math.max(...before.map((e) => e.at));
        const firstStart = Math.min(...starts.map((e) => e.at));
        if (firstStart < lastBefore) {
          problems.push(`${key}: event ${i} started ${lastBefore - firstStart} ms before event ${i - 1} was done with`);
        }
      }
      // Attempts of the key one after another: each that logged an end ended before the next started.
      const attempts = events.flatMap((e) => {
        const mine = entries.get(e.id) ?? [];
        return [...new Set(mine.map((m) => m.attempt))].map((attempt) => {
          const lines = mine.filter((m) => m.attempt === attempt);
          const start = lines.find((m) => m.phase === 'start')?.at;
          const end = lines.find((m) => m.phase !== 'start')?.at;
          return { start: start ?? -Infinity, end };
        });
      });
      attempts.sort((a, b) => a.start - b.start);
      for (let i = 1; i < attempts.length; i++) {
        const end = attempts[i - 1].end;
        if (end !== undefined && attempts[i].start < end) problems.push(`${key}: two attempts overlap`);
      }
    }
    if (problems.length > 0) throw new Error(`key order broken:\n  ${problems.slice(0, 20).join('\n  ')}`);
  } finally {
    await db.close();
  }
}

/**
 * `lastCall`: a worker's planned death comes by this handler call (see KillSchedule). The run mode's 2,000
 * events need an earlier one, else a drain can end before a worker died at every kill point.
 */
const MODES = [
  { acknowledge: 'event', keys: KEYS, perKey: PER_KEY, ordered: true, lastCall: 400 },
  { acknowledge: 'run', keys: RUN_KEYS, perKey: RUN_PER_KEY, ordered: 'run', lastCall: 100 },
] as const;

describe.each(faultBackends())('per-key order under SIGKILL on %s', (backend: BackendName) => {
  it.each(MODES)(
    `4 workers deliver every key's events in order, acknowledged by $acknowledge ($keys keys × $perKey events), while handlers fail (${FAIL_RATE * 100}%) and processes are killed at every kill point`,
    async ({ acknowledge, keys, perKey, ordered, lastCall }) => {
      const kills = new KillSchedule(MIN_KILLS, 3000, lastCall);
      const { app, fleet } = await openScenario(
        backend,
        {
          worker: { pollIntervalMs: 100, batchSize: 50, concurrency: 8, leaseMs: 3000, handlerTimeoutMs: 2000 },
          maxAttempts: MAX_ATTEMPTS,
          handlerMs: 2,
          ordered,
          failRate: FAIL_RATE,
        },
        { restart: true, envFor: kills.envFor },
      );
      const started = Date.now();
      await fleet.start(4);
      kills.start(fleet);
      // Event n belongs to key n mod keys: every transaction of 100 touches many keys, or few keys many times.
      const publish = (count: number, from: number) =>
        publishEvents(
          app,
          count,
          100,
          (n) => ({ n: from + n }),
          (n) => `key-${(from + n) % keys}`,
        );
      const ids = await publish(keys * perKey, 0);
      await kills.drain(fleet, app, ids, DRAIN_TIMEOUT_MS, () => publish(lastCall * 4, ids.length));
      const drainMs = Date.now() - started;
      await fleet.stop();

      const result = await auditOutbox(backend, app.table, app.sqlitePath, {
        ids,
        maxAttempts: MAX_ATTEMPTS,
        killedPids: fleet.killedPids,
      });
      await auditKeyOrder(backend, app.table, app.sqlitePath, ids, acknowledge === 'run');
      record({
        scenario: `per-key order acknowledged by ${acknowledge}, 4 workers, ${FAIL_RATE * 100}% failing`,
        backend,
        events: ids.length,
        kills: fleet.kills,
        duplicates: result.duplicates,
        lost: result.lost,
        dead: result.dead,
        drainMs,
      });

      expect(result).toMatchObject({ delivered: ids.length, dead: 0, lost: 0 });
      expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
      for (const point of KILL_POINTS) {
        expect(fleet.selfKills.filter((k) => k.point === point).length).toBeGreaterThan(0);
      }
      expect(result.duplicates.killed).toBeGreaterThan(0);
      expect(fleet.unexpectedExits).toEqual([]);
    },
  );
});
