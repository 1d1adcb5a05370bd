import { Controller, Get, Injectable } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import {
  OutboxConfigurationError,
  OutboxHandler,
  OutboxHealthIndicator,
  OutboxNonRetryableError,
  type OutboxMessage,
} from '../../../lib';
import { backends, describeEachServer, type BackendName } from '../../fixtures/backends';
import { mariadbUrl, postgresUrl } from '../../fixtures/env';
import { startTcpProxy } from '../../fixtures/tcp-proxy';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** The limits of the app's endpoints, changed by each test. */
const limits = { maxOldestDueAgeMs: 5_000, maxDeadLetters: 0 };

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly outbox: OutboxHealthIndicator,
  ) {}

  /** The probe: this instance. */
  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.outbox.isHealthy('outbox', limits)]);
  }

  /** What alerts read: the outbox's state. */
  @Get('state')
  @HealthCheck()
  state() {
    return this.health.check([() => this.outbox.checkState('outboxState', limits)]);
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

async function getHealth(app: TestApp, path = '/health') {
  const response = await fetch(`${app.url}${path}`);
  return { code: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * `OutboxHealthIndicator` behind a real `@nestjs/terminus` endpoint. The probe (`isHealthy`) is this
 * instance: up with the outbox's figures and state in its body, also when events wait past the limit
 * or are dead-lettered — a data problem every replica shares —, down when the database cannot be read
 * or this instance's worker has stopped. The state endpoint (`checkState`) is down on those limits.
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

  it('is up with an empty outbox: the database read, the figures in the body, the state ok', async () => {
    const { code, body } = await getHealth(app);
    expect(code).toBe(200);
    expect(body).toMatchObject({
      status: 'ok',
      details: {
        outbox: {
          status: 'up',
          database: 'up',
          worker: 'disabled',
          state: 'ok',
          due: 0,
          dead: 0,
          inFlight: 0,
          oldestDueAgeMs: null,
        },
      },
    });
    expect(await getHealth(app, '/health/state')).toMatchObject({
      code: 200,
      body: { status: 'ok', details: { outboxState: { status: 'up', database: 'up', state: 'ok', due: 0 } } },
    });
  });

  it('stays up with a backlog no worker delivers: the state says degraded, the state check is down', async () => {
    // This instance's worker is off (`worker.enabled: false`): the age comes from the database.
    await app.txHost.withTransaction(() =>
      app.outbox.publish('health.late', { n: 1 }, { availableAt: new Date(Date.now() - 60_000) }),
    );
    const probe = await getHealth(app);
    expect(probe.code).toBe(200);
    const details = (probe.body.details as Record<string, Record<string, unknown>>).outbox;
    expect(details).toMatchObject({ status: 'up', database: 'up', worker: 'disabled', state: 'degraded', due: 1 });
    expect(details.oldestDueAgeMs as number).toBeGreaterThan(5_000);
    expect(details.problems).toBeUndefined();
    const waited = /^the oldest due event has waited \d+ ms \(more than 5000\)$/;
    expect(details.warnings).toEqual([expect.stringMatching(waited)]);

    const state = await getHealth(app, '/health/state');
    expect(state.code).toBe(503);
    expect(state.body).toMatchObject({
      status: 'error',
      error: { outboxState: { status: 'down', state: 'degraded' } },
    });
    const stateDetails = (state.body.error as Record<string, Record<string, unknown>>).outboxState;
    expect(stateDetails.problems).toEqual([expect.stringMatching(waited)]);

    limits.maxOldestDueAgeMs = 3_600_000;
    expect(await getHealth(app, '/health/state')).toMatchObject({
      code: 200,
      body: { details: { outboxState: { state: 'ok' } } },
    });
    // Delivered, nothing is due: ok again under the first limit.
    limits.maxOldestDueAgeMs = 5_000;
    await app.worker.drain();
    expect((await getHealth(app, '/health/state')).body).toMatchObject({
      status: 'ok',
      details: { outboxState: { due: 0 } },
    });
  });

  it('stays up with one dead letter under maxDeadLetters: 0; the state check is down and counts it in words', async () => {
    await app.txHost.withTransaction(() => app.outbox.publish('health.doomed', { n: 1 }));
    await app.worker.drain();
    expect(await getHealth(app)).toMatchObject({
      code: 200,
      body: {
        status: 'ok',
        details: { outbox: { status: 'up', state: 'degraded', dead: 1, warnings: ['1 dead letter (more than 0)'] } },
      },
    });
    expect(await getHealth(app, '/health/state')).toMatchObject({
      code: 503,
      body: { error: { outboxState: { status: 'down', dead: 1, problems: ['1 dead letter (more than 0)'] } } },
    });
    await app.txHost.withTransaction(() => app.outbox.publish('health.doomed', { n: 2 }));
    await app.worker.drain();
    expect(await getHealth(app, '/health/state')).toMatchObject({
      body: { error: { outboxState: { dead: 2, problems: ['2 dead letters (more than 0)'] } } },
    });
    limits.maxDeadLetters = 2;
    expect(await getHealth(app, '/health/state')).toMatchObject({
      code: 200,
      body: { details: { outboxState: { status: 'up', state: 'ok', dead: 2 } } },
    });
  });

  it('is down when the database cannot be read, and says why', async () => {
    const indicator = app.module.get(OutboxHealthIndicator);
    await app.dataSource.destroy();
    try {
      const result = await indicator.isHealthy('db');
      expect(result.db).toMatchObject({ status: 'down', database: 'down', worker: 'disabled', state: 'unknown' });
      expect(result.db.problems).toEqual([expect.stringMatching(/^the outbox table cannot be read: /)]);
      expect(result.db.warnings).toEqual([expect.stringMatching(/^the figures cannot be read: /)]);
      const state = await indicator.checkState();
      expect(state.outboxState).toMatchObject({ status: 'down', database: 'down', state: 'unknown' });
      expect(state.outboxState.problems).toEqual([expect.stringMatching(/^the figures cannot be read: /)]);
    } finally {
      await app.dataSource.initialize();
    }
  });

  it('refuses limits that are not numbers of 0 or more, and a timeout of 0, with a typed error', async () => {
    const indicator = app.module.get(OutboxHealthIndicator);
    await expect(indicator.isHealthy('outbox', { maxOldestDueAgeMs: -1 })).rejects.toThrow(OutboxConfigurationError);
    await expect(indicator.isHealthy('outbox', { maxDeadLetters: Number.NaN })).rejects.toThrow(
      /health\.maxDeadLetters.*0 or more/,
    );
    await expect(indicator.checkState('outboxState', { maxBlockedKeys: -1 })).rejects.toThrow(
      /health\.maxBlockedKeys.*0 or more/,
    );
    await expect(indicator.isHealthy('outbox', { timeoutMs: 0 })).rejects.toThrow(/health\.timeoutMs.*above 0/);
  });
});

/**
 * RELIABILITY case 40: the database partitioned away — connections open, nothing answers — behind a
 * proxy that stops forwarding. The probe answers down within its timeout (Jest's test timeout is the
 * bound: before, it never answered), and so does the state check.
 */
describeEachServer('the outbox health indicator when the database stops answering on %s', (backend) => {
  it('answers down within its timeout, probe after probe, and so does the state check', async () => {
    const proxy = await startTcpProxy(backend === 'postgres' ? postgresUrl() : mariadbUrl());
    const app = await createTestApp({ backend, extraTypeOrm: { url: proxy.url } });
    try {
      const indicator = app.module.get(OutboxHealthIndicator);
      // Before the partition, the probe may take its time (a loaded CI machine): what is timed is the partition.
      expect((await indicator.isHealthy('outbox', { timeoutMs: 10_000 })).outbox).toMatchObject({
        status: 'up',
        database: 'up',
        state: 'ok',
      });
      proxy.partition();
      for (let probe = 0; probe < 2; probe++) {
        expect((await indicator.isHealthy('outbox', { timeoutMs: 500 })).outbox).toEqual({
          status: 'down',
          database: 'down',
          worker: 'disabled',
          state: 'unknown',
          problems: ['the database did not answer within 500 ms'],
          warnings: ['the figures were not read within 500 ms'],
        });
      }
      expect((await indicator.checkState('outboxState', { timeoutMs: 500 })).outboxState).toEqual({
        status: 'down',
        database: 'down',
        state: 'unknown',
        problems: ['the figures were not read within 500 ms'],
      });
    } finally {
      await proxy.close();
      await app.dispose();
    }
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

/**
 * SQLite has no server to lose; what hangs is a lock. In rollback-journal mode (WAL readers are never
 * blocked) another connection's open `BEGIN EXCLUSIVE` blocks every read, and sqlite3 waits for it in
 * its thread pool for its busy timeout (10 s here): the probe answers down within its own timeout.
 * (better-sqlite3 waits synchronously, holding the event loop: no timer can answer before it gives up.)
 */
const sqlite3Only = backends().includes('sqlite3') ? describe : describe.skip;
sqlite3Only('the outbox health indicator when a lock blocks reads on sqlite3', () => {
  it('answers down within its timeout while another connection holds an exclusive lock', async () => {
    const app = await createTestApp({ backend: 'sqlite3', extraTypeOrm: { enableWAL: false } });
    try {
      const indicator = app.module.get(OutboxHealthIndicator);
      await app.raw.query('BEGIN EXCLUSIVE');
      try {
        expect((await indicator.isHealthy('outbox', { timeoutMs: 500 })).outbox).toMatchObject({
          status: 'down',
          database: 'down',
          state: 'unknown',
          problems: ['the database did not answer within 500 ms'],
        });
      } finally {
        await app.raw.query('COMMIT');
      }
      expect((await indicator.isHealthy('outbox', { timeoutMs: 500 })).outbox).toMatchObject({ status: 'up' });
    } finally {
      await app.dispose();
    }
  });
});
