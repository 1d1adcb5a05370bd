import { Controller, Get, Injectable } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import {
  OutboxConfigurationError,
  OutboxHandler,
  OutboxHealthIndicator,
  OutboxNonRetryableError,
  type OutboxMessage,
} from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** The thresholds of the app's endpoint, changed by each test. */
const limits = { maxOldestDueAgeMs: 5_000, maxDeadLetters: 0 };

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly outbox: OutboxHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.outbox.isHealthy('outbox', limits)]);
  }
}

@Injectable()
class Handlers {
  @OutboxHandler('health.doomed')
  doomed(_message: OutboxMessage): Promise<void> {
    return Promise.reject(new OutboxNonRetryableError('the order is gone'));
  }

  @OutboxHandler('health.late')
  late(_message: OutboxMessage): Promise<void> {
    return Promise.resolve();
  }
}

async function getHealth(app: TestApp) {
  const response = await fetch(`${app.url}/health`);
  return { code: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * `OutboxHealthIndicator` behind a real `@nestjs/terminus` endpoint: up with the figures from the
 * database; down, with why, when events wait past the threshold and no worker delivers them, when
 * dead letters are more than allowed, when the database cannot be read, and when this instance's
 * worker has stopped.
 */
describe.each(backends())('the outbox health indicator on %s', (backend: BackendName) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp({
      backend,
      imports: [TerminusModule],
      controllers: [HealthController],
      providers: [Handlers],
    });
  });
  afterAll(() => app.dispose());
  beforeEach(async () => {
    Object.assign(limits, { maxOldestDueAgeMs: 5_000, maxDeadLetters: 0 });
    await app.raw.query(app.sql(`DELETE FROM "${app.table}"`));
  });

  it('is up with an empty outbox: the database read, the figures in the body', async () => {
    const { code, body } = await getHealth(app);
    expect(code).toBe(200);
    expect(body).toMatchObject({
      status: 'ok',
      details: {
        outbox: {
          status: 'up',
          database: 'up',
          worker: 'disabled',
          due: 0,
          dead: 0,
          inFlight: 0,
          oldestDueAgeMs: null,
        },
      },
    });
  });

  it('is down when the oldest due event waited past the threshold and no worker runs anywhere', async () => {
    // This instance's worker is off (`worker.enabled: false`): the age comes from the database.
    await app.txHost.withTransaction(() =>
      app.outbox.publish('health.late', { n: 1 }, { availableAt: new Date(Date.now() - 60_000) }),
    );
    const down = await getHealth(app);
    expect(down.code).toBe(503);
    const details = (down.body.error as Record<string, Record<string, unknown>>).outbox;
    expect(details).toMatchObject({ status: 'down', database: 'up', worker: 'disabled', due: 1 });
    expect(details.oldestDueAgeMs as number).toBeGreaterThan(5_000);
    expect(details.problems).toEqual([
      expect.stringMatching(/^the oldest due event has waited \d+ ms \(more than 5000\)$/),
    ]);

    limits.maxOldestDueAgeMs = 3_600_000;
    expect((await getHealth(app)).code).toBe(200);
    // Delivered, nothing is due: up again under the first threshold.
    limits.maxOldestDueAgeMs = 5_000;
    await app.worker.drain();
    expect((await getHealth(app)).body).toMatchObject({ status: 'ok', details: { outbox: { due: 0 } } });
  });

  it('is down when dead letters are more than allowed', async () => {
    await app.txHost.withTransaction(() => app.outbox.publish('health.doomed', { n: 1 }));
    await app.worker.drain();
    const down = await getHealth(app);
    expect(down.code).toBe(503);
    expect(down.body).toMatchObject({
      status: 'error',
      error: { outbox: { status: 'down', dead: 1, problems: ['1 dead letters (more than 0)'] } },
    });
    limits.maxDeadLetters = 1;
    expect(await getHealth(app)).toMatchObject({ code: 200, body: { details: { outbox: { status: 'up', dead: 1 } } } });
  });

  it('is down when the database cannot be read, and says why', async () => {
    const indicator = app.module.get(OutboxHealthIndicator);
    await app.dataSource.destroy();
    try {
      const result = await indicator.isHealthy('db');
      expect(result.db).toMatchObject({ status: 'down', database: 'down', worker: 'disabled' });
      expect(result.db.problems).toEqual([expect.stringMatching(/^the outbox table cannot be read: /)]);
    } finally {
      await app.dataSource.initialize();
    }
  });

  it('refuses thresholds that are not numbers of 0 or more, with a typed error', async () => {
    const indicator = app.module.get(OutboxHealthIndicator);
    await expect(indicator.isHealthy('outbox', { maxOldestDueAgeMs: -1 })).rejects.toThrow(OutboxConfigurationError);
    await expect(indicator.isHealthy('outbox', { maxDeadLetters: Number.NaN })).rejects.toThrow(
      /health\.maxDeadLetters.*0 or more/,
    );
  });
});

describe.each(backends())('the outbox health indicator of a running worker on %s', (backend: BackendName) => {
  it('reports the worker running, and down once it has stopped', async () => {
    const app = await createTestApp({
      backend,
      withSchedule: true,
      outbox: { worker: { enabled: true, pollIntervalMs: 60_000 } },
    });
    try {
      const indicator = app.module.get(OutboxHealthIndicator);
      expect((await indicator.isHealthy()).outbox).toMatchObject({ status: 'up', worker: 'running' });
      await app.worker.beforeApplicationShutdown();
      const { outbox } = await indicator.isHealthy();
      expect(outbox).toMatchObject({ status: 'down', worker: 'stopped', database: 'up' });
      expect(outbox.problems).toEqual(["this instance's worker is not running"]);
    } finally {
      await app.dispose();
    }
  });
});
