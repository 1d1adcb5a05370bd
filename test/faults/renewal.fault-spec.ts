import { type BackendName } from '../fixtures/backends';
import type { RunningChild } from '../fixtures/child';
import { eventually } from '../fixtures/eventually';
import { faultBackends } from './fixtures/fault-backends';
import { auditOutbox, faultScenarios, publishEvents, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const openScenario = faultScenarios();

const LEASE_MS = 1500;
/** Each handler call works three leases long; its own timeout is far above the lease. */
const WORKER = { pollIntervalMs: 100, batchSize: 10, concurrency: 5, leaseMs: LEASE_MS, handlerTimeoutMs: 20_000 };
const HANDLER_MS = 3 * LEASE_MS;

type LogRow = { event_id: string; attempt: number; pid: number; phase: string };
type Scenario = Awaited<ReturnType<typeof openScenario>>;

/** Stops the fleet, audits the table and adds the scenario to the run's report; returns the audit. */
async function settle(
  backend: BackendName,
  { app, fleet }: Scenario,
  scenario: string,
  ids: string[],
  startedAt: number,
  leaseExpiryExpected = false,
) {
  const drainMs = Date.now() - startedAt;
  await fleet.stop();
  const { killedPids } = fleet;
  const result = await auditOutbox(backend, app.table, app.sqlitePath, {
    ids,
    maxAttempts: 3,
    killedPids,
    leaseExpiryExpected,
  });
  const { duplicates, lost, dead } = result;
  record({ scenario, backend, events: ids.length, kills: killedPids.size, duplicates, lost, dead, drainMs });
  expect(fleet.unexpectedExits).toEqual([]);
  return result;
}

describe.each(faultBackends())('lease renewal on %s', (backend: BackendName) => {
  const logOf = async (app: { raw: { query<T>(text: string, params?: unknown[]): Promise<T[]> }; table: string }) =>
    (await app.raw.query<LogRow>(`SELECT "event_id", "attempt", "pid", "phase" FROM "${app.table}_log"`)).map((r) => ({
      ...r,
      attempt: Number(r.attempt),
      pid: Number(r.pid),
    }));

  it('a handler three leases long, no fault, two workers: delivered once, attempt 1, nothing run twice', async () => {
    const scenario = await openScenario(backend, { worker: WORKER, maxAttempts: 3, handlerMs: HANDLER_MS });
    const { app, fleet } = scenario;
    const started = Date.now();
    await fleet.start(2);
    const ids = await publishEvents(app, 5, 5);
    await eventually(
      async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === 5,
      60_000,
      'all delivered',
    );

    const rows = await app.raw.query<{ attempts: number }>(`SELECT "attempts" FROM "${app.table}"`);
    expect(rows.map((r) => Number(r.attempts))).toEqual([1, 1, 1, 1, 1]);
    const log = await logOf(app);
    expect(log.filter((r) => r.phase === 'start')).toHaveLength(5);
    expect(log.every((r) => r.attempt === 1)).toBe(true);
    expect(fleet.lines().filter((l) => /lease renewal|lease expired|^ABORTED/.test(l))).toEqual([]);

    const result = await settle(backend, scenario, 'renewal: 3-lease handlers, no fault', ids, started);
    expect(result).toMatchObject({ delivered: 5, lost: 0, duplicates: { killed: 0, leaseExpired: 0 } });
  });

  it('SIGKILL during a handler three leases long: no other worker takes it while the first renews; another delivers it about one lease after the kill', async () => {
    const scenario = await openScenario(backend, { worker: WORKER, maxAttempts: 3, handlerMs: HANDLER_MS });
    const { app, fleet } = scenario;
    const started = Date.now();
    const workers = await fleet.start(2);
    const [id] = await publishEvents(app, 1, 1);
    const first = await eventually(
      async () => (await logOf(app)).find((r) => r.phase === 'start'),
      30_000,
      'the first attempt to start',
    );
    const runner = workers.find((w) => w.process.pid === first.pid) as RunningChild;

    // Two leases while the first worker renews: the other one polls every 100 ms and gets nothing.
    await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS));
    expect((await logOf(app)).filter((r) => r.phase === 'start')).toHaveLength(1);

    runner.process.kill('SIGKILL');
    const killedAt = Date.now();
    const second = await eventually(
      async () => (await logOf(app)).find((r) => r.phase === 'start' && r.attempt === 2),
      30_000,
      'attempt 2 to start',
    );
    const redeliveredAfterMs = Date.now() - killedAt;
    expect(second.pid).not.toBe(first.pid);
    // What was left of the lease at the kill: at least the two thirds a renewal leaves, at most a lease.
    expect(redeliveredAfterMs).toBeGreaterThanOrEqual(LEASE_MS / 3);
    expect(redeliveredAfterMs).toBeLessThanOrEqual(LEASE_MS + WORKER.pollIntervalMs + 1000);

    await eventually(
      async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === 1,
      30_000,
      'delivery',
    );
    const name = `renewal: SIGKILL mid-handler (redelivered after ${redeliveredAfterMs} ms)`;
    expect(await settle(backend, scenario, name, [id], started)).toMatchObject({ delivered: 1, lost: 0 });
  });

  it('SIGSTOP past the lease: another worker takes the event; on SIGCONT the renewal is rejected, the signal aborted, and nothing the first worker does reaches the row', async () => {
    const scenario = await openScenario(backend, { worker: WORKER, maxAttempts: 3, handlerMs: HANDLER_MS });
    const { app, fleet } = scenario;
    const started = Date.now();
    const [first] = await fleet.start(1);
    const [id] = await publishEvents(app, 1, 1);
    await eventually(
      async () => (await logOf(app)).some((r) => r.phase === 'start'),
      30_000,
      'the first attempt to start',
    );

    // Stalled (a long GC pause, a frozen VM) past its lease: it cannot renew.
    first.process.kill('SIGSTOP');
    let taken: Record<string, unknown>;
    let second: RunningChild;
    try {
      [second] = await fleet.start(1);
      await eventually(
        async () =>
          (await logOf(app)).some((r) => r.phase === 'start' && r.attempt === 2 && r.pid === second.process.pid),
        30_000,
        'the second worker to start attempt 2',
      );
      [taken] = await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id]);
      expect(taken).toMatchObject({ status: 'pending', attempts: 2 });
    } finally {
      // Resumed while its own handler still has work to do: the renewal comes first.
      first.process.kill('SIGCONT');
    }
    await first.waitFor(new RegExp(`^ABORTED ${id} 1 OutboxLeaseLostError$`));
    await first.waitFor(/lease renewal of event\(s\) .* rejected: their lease expired/);
    // Its handler ignores the signal and finishes its work; the worker writes nothing of it.
    await eventually(
      async () => (await logOf(app)).some((r) => r.phase === 'done' && r.attempt === 1),
      30_000,
      'the first handler to finish its work',
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const [afterFirst] = await app.raw.query<Record<string, unknown>>(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [
      id,
    ]);
    // As the second worker holds it (its renewals move only available_at), or as it acknowledged it.
    const owned = ['status', 'attempts', 'claim_token', 'last_error', 'completed_handlers', 'note'];
    const pick = (r: Record<string, unknown>) => Object.fromEntries(owned.map((k) => [k, r[k]]));
    if (afterFirst.status === 'pending') expect(pick(afterFirst)).toEqual(pick(taken!));
    else expect(afterFirst).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(first.stdout().filter((l) => /acknowledgement|failure of event/.test(l))).toEqual([]);

    await eventually(
      async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === 1,
      30_000,
      'delivery by the second worker',
    );
    const [settled] = await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id]);
    expect(settled).toMatchObject({ status: 'delivered', attempts: 2, claim_token: null });
    const result = await settle(backend, scenario, 'renewal: SIGSTOP past the lease', [id], started, true);
    expect(result).toMatchObject({ delivered: 1, lost: 0, duplicates: { killed: 0, leaseExpired: 1 } });
  });
});
