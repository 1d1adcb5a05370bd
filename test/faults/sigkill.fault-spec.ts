import { type BackendName } from '../fixtures/backends';
import { faultBackends } from './fixtures/fault-backends';
import { KILL_POINTS } from './fixtures/fault-config';
import { auditOutbox, faultScenarios, publishEvents } from './fixtures/harness';
import { KillSchedule } from './fixtures/kill-schedule';
import { record } from './fixtures/report';

const EVENTS = Number(process.env.OUTBOX_FAULT_EVENTS ?? 5000);
const MIN_KILLS = Number(process.env.OUTBOX_FAULT_KILLS ?? 20);
const MAX_ATTEMPTS = 10;
const DRAIN_TIMEOUT_MS = 240_000;

const openScenario = faultScenarios();

describe.each(faultBackends())('SIGKILL on %s', (backend: BackendName) => {
  it(`3 workers drain ${EVENTS} events while killed at least ${MIN_KILLS} times, at every kill point: nothing lost, every duplicate explained`, async () => {
    const kills = new KillSchedule(MIN_KILLS, 4000);
    const { app, fleet } = await openScenario(
      backend,
      {
        worker: { pollIntervalMs: 100, batchSize: 10, concurrency: 4, leaseMs: 5000, handlerTimeoutMs: 2000 },
        maxAttempts: MAX_ATTEMPTS,
        handlerMs: 40,
      },
      { restart: true, envFor: kills.envFor },
    );
    const started = Date.now();
    await fleet.start(3);
    kills.start(fleet);
    const ids = await publishEvents(app, EVENTS, 100);
    await kills.drain(fleet, app, ids, DRAIN_TIMEOUT_MS, () => publishEvents(app, 400, 100));
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
      events: ids.length,
      kills: fleet.kills,
      duplicates: result.duplicates,
      lost: result.lost,
      dead: result.dead,
      drainMs,
    });

    expect(result).toMatchObject({ delivered: ids.length, dead: 0, lost: 0 });
    expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
    for (const point of KILL_POINTS) expect(fleet.selfKills.filter((k) => k.point === point).length).toBeGreaterThan(0);
    // A kill after the handler and before the acknowledgement must show up as a duplicate.
    expect(result.duplicates.killed).toBeGreaterThan(0);
    expect(fleet.unexpectedExits).toEqual([]);
  });
});
