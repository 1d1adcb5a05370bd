import { type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { faultBackends } from './fixtures/fault-backends';
import { auditOutbox, faultScenarios, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const EVENTS = 1000;

const openScenario = faultScenarios();

describe.each(faultBackends())('starved connection pool on %s', (backend: BackendName) => {
  it('pool of 2, handler concurrency 10, the application publishing on the same pool: progress, no deadlock', async () => {
    const { app, fleet } = await openScenario(backend, {
      worker: { pollIntervalMs: 50, batchSize: 50, concurrency: 10, leaseMs: 30_000 },
      maxAttempts: 3,
      handlerMs: 2,
      // Every handler call takes a connection twice (its log rows); so do the claims, the
      // acknowledgements and the application's transactions, each a business row and its event.
      poolSize: 2,
      publish: { count: EVENTS, perTransaction: 5 },
    });
    const started = Date.now();
    const [worker] = await fleet.start(1);
    expect(await worker.waitFor(/^POOL /)).toBe(backend === 'better-sqlite3' ? 'POOL single' : 'POOL 2');
    await worker.waitFor(/^PUBLISHED \d+$/);
    await eventually(
      async () => (await statusCounts(backend, app.table, app.sqlitePath)).delivered === EVENTS,
      120_000,
      'all delivered',
    );
    const drainMs = Date.now() - started;
    await fleet.stop();

    const [{ n: orders }] = await app.raw.query<{ n: number }>(`SELECT count(*) AS "n" FROM "${app.ordersTable}"`);
    expect(Number(orders)).toBe(EVENTS);
    const ids = (await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.table}"`)).map((r) => String(r.id));
    const result = await auditOutbox(backend, app.table, app.sqlitePath, {
      ids,
      maxAttempts: 3,
      killedPids: fleet.killedPids,
    });
    record({
      scenario: 'pool of 2, concurrency 10',
      backend,
      events: EVENTS,
      kills: 0,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });
    expect(result).toMatchObject({ delivered: EVENTS, lost: 0, duplicates: { killed: 0, leaseExpired: 0 } });
    expect(worker.stderr()).not.toMatch(/timeout|deadlock|failed/i);
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
