import { rawDb, type BackendName } from '../fixtures/backends';
import type { TestApp } from '../fixtures/test-app';
import { faultBackends } from './fixtures/fault-backends';
import { eventually } from '../fixtures/eventually';
import { FAULT_TX_TOPIC, KILL_POINTS } from './fixtures/fault-config';
import { faultScenarios, publishEvents, statusCounts } from './fixtures/harness';
import { KillSchedule } from './fixtures/kill-schedule';
import { record } from './fixtures/report';

const EVENTS = Number(process.env.OUTBOX_FAULT_TX_EVENTS ?? 1500);
const MIN_KILLS = Number(process.env.OUTBOX_FAULT_TX_KILLS ?? 9);
const MAX_ATTEMPTS = 20;
const DRAIN_TIMEOUT_MS = 240_000;

const openScenario = faultScenarios();

async function createEffects(app: TestApp) {
  await app.dataSource.query(
    app.sql(
      `CREATE TABLE "${app.table}_effects" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`,
    ),
  );
}

/**
 * Every committed event delivered, none left leased, and exactly one effect row each: a kill before the
 * handler's commit left none, a kill after it left one that the retry did not repeat.
 */
async function auditEffects(backend: BackendName, table: string, sqlitePath: string | undefined, ids: string[]) {
  const db = await rawDb(backend, sqlitePath);
  try {
    const rows = await db.query<{ id: string; status: string; claim_token: string | null }>(
      `SELECT "id", "status", "claim_token" FROM "${table}"`,
    );
    const effects = await db.query<{ event_id: string }>(`SELECT "event_id" FROM "${table}_effects"`);
    const count = new Map<string, number>();
    for (const e of effects) count.set(e.event_id, (count.get(e.event_id) ?? 0) + 1);
    const byId = new Map(rows.map((r) => [String(r.id), r]));
    const problems: string[] = [];
    for (const id of ids) {
      const row = byId.get(id);
      if (row?.status !== 'delivered' || row.claim_token !== null) problems.push(`${id}: ${row?.status ?? 'gone'}`);
      const n = count.get(id) ?? 0;
      if (n !== 1) problems.push(`${id}: ${n} effect(s)`);
    }
    const invented = [...count.keys()].filter((id) => !byId.has(id));
    if (invented.length > 0) problems.push(`effects of events never committed: ${invented.join(', ')}`);
    if (problems.length > 0) throw new Error(`audit failed:\n  ${problems.slice(0, 30).join('\n  ')}`);
    return { delivered: ids.length, effects: effects.length };
  } finally {
    await db.close();
  }
}

describe.each(faultBackends())('SIGKILL with a transactional handler on %s', (backend: BackendName) => {
  it.each([
    ['unordered', false],
    ['ordered', true],
  ])(
    `%s: 3 workers drain ${EVENTS} events while killed at least ${MIN_KILLS} times, at every kill point: exactly one effect per event`,
    async (kind, ordered) => {
      // 1,500 events over three processes, each restarted when killed: a planned death within its first 100 calls.
      const kills = new KillSchedule(MIN_KILLS, 3000, 100);
      const { app, fleet } = await openScenario(
        backend,
        {
          worker: { pollIntervalMs: 100, batchSize: 10, concurrency: 4, leaseMs: 5000, handlerTimeoutMs: 2000 },
          maxAttempts: MAX_ATTEMPTS,
          handlerMs: 10,
          ordered,
        },
        { restart: true, envFor: kills.envFor },
      );
      await createEffects(app);
      const started = Date.now();
      await fleet.start(3);
      kills.start(fleet);
      const publish = (count: number, from: number) =>
        publishEvents(app, count, 100, undefined, (n) => (ordered ? `k${(from + n) % 50}` : undefined), FAULT_TX_TOPIC);
      const ids = await publish(EVENTS, 0);
      await kills.drain(fleet, app, ids, DRAIN_TIMEOUT_MS, () => publish(300, ids.length));
      const drainMs = Date.now() - started;
      await fleet.stop();

      const result = await auditEffects(backend, app.table, app.sqlitePath, ids);
      record({
        scenario: `SIGKILL, transactional handler, ${kind}`,
        backend,
        events: ids.length,
        kills: fleet.kills,
        duplicates: { killed: 0, leaseExpired: 0 },
        lost: 0,
        dead: 0,
        drainMs,
      });
      expect(result).toEqual({ delivered: ids.length, effects: ids.length });
      expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
      for (const point of KILL_POINTS)
        expect(fleet.selfKills.filter((k) => k.point === point).length).toBeGreaterThan(0);
      expect(fleet.unexpectedExits).toEqual([]);
    },
  );
});

// Server databases only: on SQLite the stalled handler's transaction holds the one write lock of the
// file, so no other claim can happen until it resumes (and then its own commit is the only one).
describe.each(faultBackends().filter((b) => b === 'postgres' || b === 'mariadb'))(
  'a transactional handler stalled past its lease, on %s',
  (backend: BackendName) => {
    it('leaves no effect of the stalled attempt: the second claim’s commits, the first one rolls back', async () => {
      const { app, fleet } = await openScenario(backend, {
        worker: { pollIntervalMs: 100, batchSize: 10, concurrency: 2, leaseMs: 2000, handlerTimeoutMs: 1500 },
        maxAttempts: 3,
        handlerMs: 500,
      });
      await createEffects(app);
      const [first] = await fleet.start(1);
      const [id] = await publishEvents(app, 1, 1, undefined, undefined, FAULT_TX_TOPIC);
      // Stalled (a long GC pause, a frozen VM) with its effect written in its open transaction.
      await first.waitFor(new RegExp(`^WROTE ${id} 1$`));
      first.process.kill('SIGSTOP');
      let second;
      try {
        [second] = await fleet.start(1);
        await eventually(
          async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === 1,
          30_000,
          'delivery by the second worker',
        );
      } finally {
        first.process.kill('SIGCONT');
      }
      // The first one's attempt ends (its timeout, or its handler returning): its transaction rolls back,
      // fenced out by the second claim's token, and the failure it would record is refused.
      await first.waitFor(/rejected|lease of outbox event .* was lost/);
      await fleet.stop();
      const effects = await app.raw.query<{ event_id: string; attempt: number; pid: number }>(
        `SELECT "event_id", "attempt", "pid" FROM "${app.table}_effects"`,
      );
      expect(effects.map((e) => [e.event_id, Number(e.attempt), Number(e.pid)])).toEqual([[id, 2, second.process.pid]]);
      const [row] = await app.raw.query<{ status: string; attempts: number }>(
        `SELECT "status", "attempts" FROM "${app.table}" WHERE "id" = ?`,
        [id],
      );
      expect([row.status, Number(row.attempts)]).toEqual(['delivered', 2]);
      expect(fleet.unexpectedExits).toEqual([]);
    });
  },
);
