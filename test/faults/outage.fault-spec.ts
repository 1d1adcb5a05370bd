import { eventually } from '../fixtures/eventually';
import { createTestApp, type TestApp } from '../fixtures/test-app';
import type { FaultWorkerConfig } from './fixtures/fault-config';
import { faultBackends } from './fixtures/fault-backends';
import {
  auditOutbox,
  createAttemptLog,
  cutConnections,
  dropTables,
  publishEvents,
  restartServer,
  statusCounts,
  WorkerFleet,
} from './fixtures/harness';
import { record } from './fixtures/report';

const EVENTS = 3000;
const DOWN_MS = 3000;

let fleet: WorkerFleet | undefined;
let table: string | undefined;
afterEach(async () => {
  await fleet?.stop();
  fleet = undefined;
});

// SQLite has no server to restart: an embedded database goes down only with its process, which the
// SIGKILL scenario covers.
const servers = faultBackends().filter((b): b is 'postgres' | 'mariadb' => b === 'postgres' || b === 'mariadb');

describe.each(servers)('database restart mid-drain on %s', (backend) => {
  afterEach(async () => {
    if (table) await dropTables(backend, table);
    table = undefined;
  });

  it(`3 workers reconnect by themselves after the server is down for ${DOWN_MS / 1000} s: no process ends, nothing lost`, async () => {
    let app: TestApp | undefined = await createTestApp({ backend });
    table = app.table;
    await createAttemptLog(app);
    const ids = await publishEvents(app, EVENTS, 100);
    // The test's own connections would die with the server: close them first.
    await app.close();
    await app.raw.close();
    app = undefined;

    const config: FaultWorkerConfig = {
      backend,
      table,
      worker: { pollIntervalMs: 100, batchSize: 20, concurrency: 5, leaseMs: 3000 },
      maxAttempts: 10,
      handlerMs: 20,
    };
    fleet = new WorkerFleet(config);
    const started = Date.now();
    await fleet.start(3);
    await eventually(
      async () => (await statusCounts(backend, table!)).delivered >= EVENTS / 5,
      60_000,
      'a fifth delivered',
    );

    restartServer(backend, DOWN_MS);
    const afterRestart = await statusCounts(backend, table);
    // The outage fell in the middle of the drain.
    expect(afterRestart.delivered).toBeLessThan(EVENTS);

    await eventually(
      async () => (await statusCounts(backend, table!)).delivered === EVENTS,
      120_000,
      'all delivered after the restart',
    );
    const drainMs = Date.now() - started;
    // Every worker lived through it: none exited, none was replaced.
    expect(fleet.running.size).toBe(3);
    expect(fleet.all).toHaveLength(3);
    const stderr = fleet.all.map((w) => w.stderr()).join('\n');
    expect(stderr).not.toMatch(/unhandled|uncaught/i);
    // They did see the outage: statements failed and were logged, then work resumed.
    expect(stderr).toMatch(/Outbox (claim|acknowledgement|failure|release)[^\n]* failed/);
    await fleet.stop();

    // Writes lost with the connections (acknowledgements, failures) leave leases to expire: a
    // repeated run is explained by that.
    const result = await auditOutbox(backend, table, undefined, {
      ids,
      maxAttempts: 10,
      killedPids: fleet.killedPids,
      leaseExpiryExpected: true,
    });
    record({
      scenario: `server down ${DOWN_MS / 1000} s mid-drain`,
      backend,
      events: EVENTS,
      kills: 0,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });
    expect(result).toMatchObject({ delivered: EVENTS, dead: 0, lost: 0 });
    expect(fleet.unexpectedExits).toEqual([]);
  });
});

describe.each(servers)('connections cut mid-drain on %s', (backend) => {
  afterEach(async () => {
    if (table) await dropTables(backend, table);
    table = undefined;
  });

  it('every worker connection cut every 300 ms for 6 s: workers reconnect by themselves, no process ends, nothing lost', async () => {
    let app: TestApp | undefined = await createTestApp({ backend });
    table = app.table;
    await createAttemptLog(app);
    const ids = await publishEvents(app, EVENTS, 100);
    // Only the workers' connections may be on the database while it runs.
    await app.close();
    await app.raw.close();
    app = undefined;

    fleet = new WorkerFleet({
      backend,
      table,
      worker: { pollIntervalMs: 100, batchSize: 20, concurrency: 5, leaseMs: 3000 },
      maxAttempts: 10,
      // Slow enough that the 6 s of cuts fall well inside the drain.
      handlerMs: 60,
    });
    const started = Date.now();
    await fleet.start(3);
    await eventually(
      async () => (await statusCounts(backend, table!)).delivered >= EVENTS / 10,
      60_000,
      'a tenth delivered',
    );
    let cut = 0;
    for (let round = 0; round < 20; round++) {
      cut += await cutConnections(backend);
      // The fault's own rhythm (a reaper that fires every 300 ms), not a wait for a condition.
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    expect(cut).toBeGreaterThan(20);
    expect((await statusCounts(backend, table)).delivered).toBeLessThan(EVENTS);

    await eventually(
      async () => (await statusCounts(backend, table!)).delivered === EVENTS,
      120_000,
      'all delivered after the cuts',
    );
    const drainMs = Date.now() - started;
    expect(fleet.running.size).toBe(3);
    expect(fleet.all).toHaveLength(3);
    const stderr = fleet.all.map((w) => w.stderr()).join('\n');
    expect(stderr).not.toMatch(/unhandled|uncaught/i);
    await fleet.stop();

    const result = await auditOutbox(backend, table, undefined, {
      ids,
      maxAttempts: 10,
      killedPids: fleet.killedPids,
      leaseExpiryExpected: true,
    });
    record({
      scenario: `${cut} connections cut over 6 s`,
      backend,
      events: EVENTS,
      kills: 0,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });
    expect(result).toMatchObject({ delivered: EVENTS, dead: 0, lost: 0 });
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
