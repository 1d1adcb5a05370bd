import { type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { faultBackends } from './fixtures/fault-backends';
import { KILL_POINTS } from './fixtures/fault-config';
import { auditOutbox, faultScenarios, publishEvents, statusCounts } from './fixtures/harness';
import { record } from './fixtures/report';

const EVENTS = Number(process.env.OUTBOX_FAULT_EVENTS ?? 5000);
const MIN_KILLS = Number(process.env.OUTBOX_FAULT_KILLS ?? 20);
const MAX_ATTEMPTS = 10;
const DRAIN_TIMEOUT_MS = 240_000;

const openScenario = faultScenarios();

describe.each(faultBackends())('SIGKILL on %s', (backend: BackendName) => {
  it(`3 workers drain ${EVENTS} events while killed at least ${MIN_KILLS} times, at every kill point: nothing lost, every duplicate explained`, async () => {
    // Each process plans its own death at a point taken in turn (after the claim and before the
    // handler, during it, after it and before the acknowledgement), somewhere in its first 400
    // handler calls; and every 4 s we kill one from outside, wherever it happens to be (claiming,
    // acknowledging, starting up). Once the fleet has been killed MIN_KILLS times and at every point,
    // the killing stops and the rest drains: how long a drain takes while processes keep dying and
    // booting is the machine's speed, not the library's, and CI's 2 cores must not decide the test.
    let killing = true;
    const { app, fleet } = await openScenario(
      backend,
      {
        worker: { pollIntervalMs: 100, batchSize: 10, concurrency: 4, leaseMs: 5000, handlerTimeoutMs: 2000 },
        maxAttempts: MAX_ATTEMPTS,
        handlerMs: 40,
      },
      {
        restart: true,
        envFor: (n): Record<string, string> =>
          killing
            ? {
                OUTBOX_KILL_AT: String(40 + Math.floor(Math.random() * 360)),
                OUTBOX_KILL_POINT: KILL_POINTS[n % KILL_POINTS.length],
              }
            : {},
      },
    );
    const started = Date.now();
    let progress = '';
    await fleet.start(3);
    const killer = (async () => {
      while (killing) {
        await new Promise((resolve) => setTimeout(resolve, 4000));
        if (killing) fleet.killOne();
      }
    })();
    const killedEnough = () =>
      fleet.kills >= MIN_KILLS && KILL_POINTS.every((point) => fleet.selfKills.some((k) => k.point === point));

    const ids = await publishEvents(app, EVENTS, 100);
    try {
      await eventually(
        async () => {
          const counts = await statusCounts(backend, app.table, app.sqlitePath);
          if (killing && killedEnough()) killing = false;
          progress = `${JSON.stringify(counts)}, ${fleet.kills} kills, ${fleet.running.size} running`;
          return counts.delivered + counts.dead === EVENTS && !killing;
        },
        DRAIN_TIMEOUT_MS,
        `all ${EVENTS} delivered and ${MIN_KILLS} kills at every point`,
      );
    } catch (error) {
      throw new Error(`${(error as Error).message}; last seen: ${progress}; ${fleet.describe()}`);
    } finally {
      killing = false;
      await killer;
    }
    const drainMs = Date.now() - started;
    await fleet.stop();

    const result = await auditOutbox(backend, app.table, app.sqlitePath, {
      ids,
      maxAttempts: MAX_ATTEMPTS,
      killedPids: fleet.killedPids,
    });
    record({
      scenario: 'SIGKILL, 3 workers',
      backend,
      events: EVENTS,
      kills: fleet.kills,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });

    expect(result).toMatchObject({ delivered: EVENTS, dead: 0, lost: 0 });
    expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
    for (const point of KILL_POINTS) expect(fleet.selfKills.filter((k) => k.point === point).length).toBeGreaterThan(0);
    // A kill after the handler and before the acknowledgement must show up as a duplicate.
    expect(result.duplicates.killed).toBeGreaterThan(0);
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
