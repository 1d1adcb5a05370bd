import { type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { faultBackends } from './fixtures/fault-backends';
import { auditOutbox, faultScenarios, publishEvents, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const openScenario = faultScenarios();

describe.each(faultBackends())('lease expiry while a handler still runs, on %s', (backend: BackendName) => {
  it('a stalled worker (SIGSTOP) loses its lease: the second claim runs the event again, the first one’s late write is rejected and logged', async () => {
    const { app, fleet } = await openScenario(backend, {
      worker: { pollIntervalMs: 100, batchSize: 10, concurrency: 2, leaseMs: 2000, handlerTimeoutMs: 1500 },
      maxAttempts: 3,
      handlerMs: 500,
    });
    const started = Date.now();
    const [first] = await fleet.start(1);
    const [id] = await publishEvents(app, 1, 1);

    // Stall the first worker in the middle of its handler (a long GC pause, a frozen VM) for longer
    // than its lease.
    await eventually(
      async () =>
        (await app.raw.query(`SELECT 1 FROM "${app.table}_log" WHERE "event_id" = ? AND "phase" = 'start'`, [id]))
          .length,
      30_000,
      'the first attempt to start',
    );
    first.process.kill('SIGSTOP');
    try {
      const [second] = await fleet.start(1);
      await eventually(
        async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === 1,
        30_000,
        'delivery by the second worker',
      );
      const settled = await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id]);

      first.process.kill('SIGCONT');
      // Its handler finishes; the acknowledgement (or, had its timeout fired first, the failure) is
      // fenced by its token, which the second claim replaced, so it changes nothing, and says so.
      await first.waitFor(/rejected: (its|their) lease expired/);
      await eventually(
        async () => (await app.raw.query(`SELECT 1 FROM "${app.table}_log" WHERE "phase" = 'done'`)).length === 2,
        10_000,
        'both handler runs to finish',
      );
      expect(await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id])).toEqual(settled);
      expect(settled[0]).toMatchObject({ status: 'delivered', attempts: 2, claim_token: null });
      const log = await app.raw.query<{ attempt: number; pid: number; phase: string }>(
        `SELECT "attempt", "pid", "phase" FROM "${app.table}_log" ORDER BY "attempt", "phase" DESC`,
      );
      expect(log.map((r) => [Number(r.attempt), Number(r.pid), r.phase])).toEqual([
        [1, first.process.pid, 'start'],
        [1, first.process.pid, 'done'],
        [2, second.process.pid, 'start'],
        [2, second.process.pid, 'done'],
      ]);
    } finally {
      first.process.kill('SIGCONT');
    }
    const drainMs = Date.now() - started;
    await fleet.stop();

    const result = await auditOutbox(backend, app.table, app.sqlitePath, {
      ids: [id],
      maxAttempts: 3,
      killedPids: fleet.killedPids,
      leaseExpiryExpected: true,
    });
    record({
      scenario: 'lease expiry (SIGSTOP past the lease)',
      backend,
      events: 1,
      kills: 0,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });
    expect(result).toMatchObject({ delivered: 1, lost: 0, duplicates: { killed: 0, leaseExpired: 1 } });
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
