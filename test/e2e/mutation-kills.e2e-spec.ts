import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { runInNewContext } from 'node:vm';
import { DataSource } from 'typeorm';
import {
  OutboxDedupeConflictError,
  OutboxHandler,
  OutboxRetryLaterError,
  OutboxTransactionRequiredError,
  OutboxValidationError,
  type OutboxMessage,
  type OutboxTransport,
} from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { backends, isSqlite, removeSqliteFile, sqliteFile } from '../fixtures/backends';
import { deferred, eventually } from '../fixtures/eventually';
import { createTestApp, outboxRows, typeOrmOptions, type TestApp } from '../fixtures/test-app';

/**
 * Behaviour that mutation testing (`npm run test:mutation`) found no test pinning down: each test
 * names what it holds in place.
 */

/** Milliseconds from the database's now to an event's due time. */
const DUE_IN_MS = {
  postgres: `extract(epoch FROM ("available_at" - now())) * 1000`,
  mariadb: 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "available_at") / 1000',
  sqlite3: `(julianday("available_at") - julianday('now')) * 86400000`,
  'better-sqlite3': `(julianday("available_at") - julianday('now')) * 86400000`,
};

/** Blocks the event loop: a stalled process, which no timer can interrupt. */
function stall(ms: number) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    // busy
  }
}

@Injectable()
class Script {
  rejectWith: unknown;
  stallMs = 0;
  throwAfterStall = false;
  seen: Array<{ handler: string; payload: unknown; headers: Record<string, string> }> = [];
  gate = deferred();
  readSignal = deferred<AbortSignal>();
  started: string[] = [];
  running = 0;
  maxRunning = 0;
  /** What the 'sabotage' handler does before it returns or throws. */
  sabotage: () => Promise<unknown> = async () => undefined;
  sabotageThenThrow = false;
  /** Ids in the order the 'paced' handler ran them. */
  paced: string[] = [];
}

@Injectable()
class Handlers {
  constructor(private readonly s: Script) {}

  @OutboxHandler('rejects')
  async rejects() {
    return Promise.reject(this.s.rejectWith);
  }

  @OutboxHandler('copied')
  async meddler(m: OutboxMessage) {
    this.s.seen.push({ handler: 'meddler', payload: structuredClone(m.payload), headers: { ...m.headers } });
    (m.payload as { items: string[] }).items.push('added by meddler');
    m.headers['x-meddled'] = 'yes';
  }

  @OutboxHandler('copied')
  async bystander(m: OutboxMessage) {
    this.s.seen.push({ handler: 'bystander', payload: structuredClone(m.payload), headers: { ...m.headers } });
  }

  @OutboxHandler('late.signal', { timeoutMs: 50 })
  async lateSignal(m: OutboxMessage) {
    // Never touches the signal until the worker has given up on this call.
    await this.s.gate.promise;
    this.s.readSignal.resolve(m.signal);
  }

  @OutboxHandler('retry.later')
  async retryLater(m: OutboxMessage) {
    throw new OutboxRetryLaterError('rate limited', (m.payload as { afterMs: number }).afterMs);
  }

  /** Stalls (and maybe throws) once; succeeds at once afterwards. */
  @OutboxHandler('stalls')
  async stalls() {
    const ms = this.s.stallMs;
    if (ms === 0) return;
    this.s.stallMs = 0;
    stall(ms);
    if (this.s.throwAfterStall) throw new Error('failed after the stall');
  }

  @OutboxHandler('parallel')
  async parallel(m: OutboxMessage) {
    this.s.started.push(m.id);
    this.s.running++;
    this.s.maxRunning = Math.max(this.s.maxRunning, this.s.running);
    await this.s.gate.promise;
    this.s.running--;
  }

  @OutboxHandler('quick')
  async quick() {}

  /** By call: the first returns at once, the second takes 300 ms of simulated work, the third waits for the gate. */
  @OutboxHandler('paced')
  async paced(m: OutboxMessage) {
    const call = this.s.paced.push(m.id);
    if (call === 2) await new Promise((resolve) => setTimeout(resolve, 300));
    if (call === 3) await this.s.gate.promise;
  }

  @OutboxHandler('sabotage')
  async sabotageStore() {
    await this.s.sabotage();
    if (this.s.sabotageThenThrow) throw new Error('handler failed too');
  }
}

describe.each(backends())('mutation kills on %s', (backend) => {
  let app: TestApp;
  let s: Script;
  let store: OutboxStore;

  async function start(outbox: Parameters<typeof createTestApp>[0]['outbox'] = {}, extra: Partial<Parameters<typeof createTestApp>[0]> = {}) {
    app = await createTestApp({
      backend,
      providers: [Script, Handlers],
      outbox: { retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 }, ...outbox },
      ...extra,
    });
    s = app.module.get(Script);
    store = app.module.get(OUTBOX_STORE);
  }
  afterEach(() => app?.dispose());

  const publish = (topic: string, payload: unknown = {}, options = {}) =>
    app.txHost.withTransaction(() => app.outbox.publish(topic, payload, options));
  const row = async (id: string) => (await outboxRows(app)).find((r) => r.id === id)!;

  describe('what a failure records', () => {
    const circular: Record<string, unknown> = { name: 'loop' };
    circular.self = circular;
    it.each([
      ['a string', 'a string', 'non-Error rejection: a string'],
      ['undefined', undefined, 'non-Error rejection: undefined'],
      ['an object', { code: 42 }, 'non-Error rejection: {"code":42}'],
      ['an object JSON cannot write', circular, 'non-Error rejection: [object Object]'],
      ['an Error subclass', new TypeError('bad input'), 'TypeError: bad input'],
      ['an error made in another realm', runInNewContext(`new RangeError('elsewhere')`), 'RangeError: elsewhere'],
      ['an object shaped like an error', { name: 'DriverError', message: 'gone', code: 7 }, 'DriverError: gone'],
    ])('writes %s as its own text, prefixed by the handler', async (_name, value, text) => {
      await start({ retry: { maxAttempts: 1 } });
      s.rejectWith = value;
      const { id } = await publish('rejects');
      expect(await app.worker.drain()).toEqual({ delivered: 0, failed: 0, deadLettered: 1, released: 0, lostLeases: 0 });
      expect((await row(id)).last_error).toBe(`Handlers.rejects: ${text}`);
    });

    it('waits as long as the longest Retry-After a handler asks for, capped at one day', async () => {
      await start({ retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 } });
      const soon = await publish('retry.later', { afterMs: 120_000 });
      const never = await publish('retry.later', { afterMs: 30 * 86_400_000 });
      expect(await app.worker.drain()).toMatchObject({ failed: 2, deadLettered: 0 });
      const dueInMs = async (id: string) => {
        const [{ ms }] = await app.raw.query<{ ms: number }>(`SELECT ${DUE_IN_MS[backend]} AS ms FROM "${app.table}" WHERE "id" = ?`, [id]);
        return Number(ms);
      };
      expect(await dueInMs(soon.id)).toBeGreaterThan(100_000);
      expect(await dueInMs(soon.id)).toBeLessThan(120_001);
      expect(await dueInMs(never.id)).toBeGreaterThan(86_400_000 - 20_000);
      expect(await dueInMs(never.id)).toBeLessThan(86_400_001);
      expect(app.logger.matching(/attempt 1 of 5 failed; retrying in 120000 ms or later: Handlers.retryLater: /)).toHaveLength(1);
      expect(app.logger.matching(/attempt 1 of 5 failed; retrying in 86400000 ms or later/)).toHaveLength(1);
    });
  });

  it('gives every handler of a topic its own copy of the payload and headers', async () => {
    await start();
    await publish('copied', { items: ['a'] }, { headers: { 'x-trace': 't' } });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(s.seen).toHaveLength(2);
    for (const seen of s.seen) {
      expect(seen.payload).toEqual({ items: ['a'] });
      expect(seen.headers).toEqual({ 'x-trace': 't' });
    }
  });

  it('hands a handler that reads its signal only after its timeout a signal already aborted, with the timeout as reason', async () => {
    await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('late.signal');
    expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
    expect((await row(id)).last_error).toBe(
      'Handlers.lateSignal: OutboxHandlerTimeoutError: handler did not finish within its timeout of 50 ms',
    );
    s.gate.resolve();
    const signal = await s.readSignal.promise;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(Error);
    expect((signal.reason as Error).message).toBe('handler did not finish within its timeout of 50 ms');
  });

  it('runs as many handlers at once as `concurrency`, and no more', async () => {
    await start({ worker: { concurrency: 2, batchSize: 10 } });
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'parallel', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await eventually(() => s.running === 2, 10_000, 'two handlers running');
    // Real round trips while both are held: a third must not start.
    for (let i = 0; i < 3; i++) await app.outbox.counts();
    expect(s.started).toHaveLength(2);
    s.gate.resolve();
    expect(await draining).toMatchObject({ delivered: 3 });
    expect(s.maxRunning).toBe(2);
  });

  describe('a lease lost while the process stalled', () => {
    it('counts a rejected acknowledgement as a lost lease; the next claim delivers the event', async () => {
      await start({ worker: { leaseMs: 1000 } });
      s.stallMs = 1500;
      const { id } = await publish('stalls');
      expect(await app.worker.drain()).toEqual({ delivered: 1, failed: 0, deadLettered: 0, released: 0, lostLeases: 1 });
      expect(app.logger.matching(/^Outbox acknowledgement of 1 of 1 event\(s\) rejected: their lease expired/)).toHaveLength(1);
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 2 });
    });

    it('counts a rejected failure as a lost lease and records none of it', async () => {
      await start({ worker: { leaseMs: 1000 } });
      s.stallMs = 1500;
      s.throwAfterStall = true;
      const { id } = await publish('stalls');
      expect(await app.worker.drain()).toEqual({ delivered: 1, failed: 0, deadLettered: 0, released: 0, lostLeases: 1 });
      expect(app.logger.matching(new RegExp(`^Outbox failure of event ${id} rejected: its lease expired`))).toHaveLength(1);
      const stored = await row(id);
      expect(stored).toMatchObject({ status: 'delivered', attempts: 2 });
      // The rejected failure wrote nothing: no error, only the claim's note of the expired attempt 1.
      expect(stored.last_error).toBeNull();
      expect(stored.note).toMatch(/^attempt 1 of \d+ did not finish before its lease expired/);
    });
  });

  describe('a database error while the worker records', () => {
    const dropOutbox = () => app.raw.query(`DROP TABLE "${app.table}"`);

    it('a claim: logged, and the drain ends with nothing done', async () => {
      await start();
      await dropOutbox();
      expect(await app.worker.drain()).toEqual({ delivered: 0, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
      expect(app.logger.matching(/^Outbox claim failed; will retry at the next poll: QueryFailedError: /)).toHaveLength(1);
    });

    it('an acknowledgement: logged with the event, left to the lease', async () => {
      await start();
      s.sabotage = dropOutbox;
      const { id } = await publish('sabotage');
      expect(await app.worker.drain()).toEqual({ delivered: 0, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
      expect(app.logger.matching(new RegExp(`^Outbox acknowledgement of event ${id} failed; its lease will expire: QueryFailedError: `))).toHaveLength(1);
    });

    it('a failure: logged with the event, left to the lease', async () => {
      await start();
      s.sabotage = dropOutbox;
      s.sabotageThenThrow = true;
      const { id } = await publish('sabotage');
      // A database error is not a lost lease: nothing is counted, for a failure as for an acknowledgement.
      expect(await app.worker.drain()).toEqual({ delivered: 0, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
      expect(app.logger.matching(new RegExp(`^Outbox failure of event ${id} failed; its lease will expire: QueryFailedError: `))).toHaveLength(1);
    });

    it('a release: logged with the event, not counted', async () => {
      await start({ worker: { leaseMs: 1000, handlerTimeoutMs: 500, concurrency: 1, batchSize: 2 } });
      // The first handler drops the table and uses 450 ms of the 1 s lease: the second event cannot fit
      // its 500 ms timeout in what is left, and its release meets the missing table.
      s.sabotage = async () => {
        s.sabotage = async () => undefined;
        await dropOutbox();
        await new Promise((resolve) => setTimeout(resolve, 450));
      };
      await app.txHost.withTransaction(() => app.outbox.publishMany([1, 2].map((n) => ({ topic: 'sabotage', payload: { n } }))));
      expect(await app.worker.drain()).toEqual({ delivered: 0, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
      expect(app.logger.matching(/^Outbox release of event \S+ failed; its lease will expire: \w+Error: /)).toHaveLength(1);
    });
  });

  describe('shutdown', () => {
    it('removes its interval from the application’s scheduler', async () => {
      await start({ worker: { enabled: true, pollIntervalMs: 60_000 } }, { withSchedule: true });
      const registry = app.module.get(SchedulerRegistry);
      expect(registry.getIntervals()).toContain(`outbox-worker:${app.table}`);
      await app.close();
      expect(registry.getIntervals()).not.toContain(`outbox-worker:${app.table}`);
    });

    it('stops every transport, logging one that fails to stop', async () => {
      const stopped: string[] = [];
      const transport = (name: string, stop: () => Promise<void>): OutboxTransport => ({
        name,
        send: async () => undefined,
        beforeApplicationShutdown: stop,
      });
      await start({
        transports: [
          transport('broken', async () => {
            throw new Error('socket already gone');
          }),
          transport('fine', async () => void stopped.push('fine')),
        ],
      });
      await app.close();
      expect(stopped).toEqual(['fine']);
      expect(app.logger.matching(/^Outbox transport broken failed to stop: Error: socket already gone$/)).toHaveLength(1);
    });
  });

  it.each([1, 10])('acknowledges a batch of quick successes in one statement (concurrency %i)', async (concurrency) => {
    const statements: string[] = [];
    await start(
      { worker: { batchSize: 10, concurrency } },
      {
        typeormLogger: {
          logQuery: (query: string) => void statements.push(query),
          logQueryError: () => undefined,
          logQuerySlow: () => undefined,
          logSchemaBuild: () => undefined,
          logMigration: () => undefined,
          log: () => undefined,
        },
      },
    );
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3, 4, 5].map((n) => ({ topic: 'quick', payload: { n } }))),
    );
    statements.length = 0;
    expect(await app.worker.drain()).toMatchObject({ delivered: 5 });
    expect(statements.filter((q) => /^\s*UPDATE .*'delivered'/s.test(q))).toHaveLength(1);
  });

  it('acknowledges the successes of a slow batch while the batch still runs', async () => {
    await start({ worker: { batchSize: 3, concurrency: 1 } });
    // One at a time: a quick one, one whose work outlasts the 250 ms flush interval, one held open.
    await app.txHost.withTransaction(() => app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'paced', payload: { n } }))));
    const draining = app.worker.drain();
    await eventually(() => s.paced.length === 3, 10_000, 'the third handler running');
    const [quick, slow, held] = s.paced;
    await eventually(
      async () => (await outboxRows(app)).filter((r) => r.status === 'delivered').length === 2,
      10_000,
      'the first two acknowledged while the third runs',
    );
    expect((await row(quick)).status).toBe('delivered');
    expect((await row(slow)).status).toBe('delivered');
    expect((await row(held)).status).toBe('pending');
    s.gate.resolve();
    expect(await draining).toEqual({ delivered: 3, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
  });

  it('counts the suspects it could not give back as lost leases, when the lease ran out first', async () => {
    await start({ worker: { leaseMs: 1000, concurrency: 10 }, retry: { maxAttempts: 10, initialDelayMs: 0, maxDelayMs: 0 } });
    const cut = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'quick', payload: { n } }))),
    );
    // A worker claims all three and dies; their leases run out, so all three are suspects next time.
    await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 10 });
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    // The process stalls right after the next claim, past that claim's lease, before it gives the two
    // suspects back: the release is rejected, and so is the start of the third (its lease is gone too).
    const releaseMany = store.releaseMany.bind(store);
    let stalled = false;
    jest.spyOn(store, 'releaseMany').mockImplementation(async (ids, token, uncount) => {
      if (!stalled) {
        stalled = true;
        stall(1100);
      }
      return releaseMany(ids, token, uncount);
    });
    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 3, failed: 0, deadLettered: 0, lostLeases: 3 });
    expect(app.logger.matching(/^Outbox release of event .* rejected: its lease expired/)).toHaveLength(1);
    for (const { id } of cut) expect((await row(id)).status).toBe('delivered');
  });

  it('counts pending, in-flight, delivered and dead events apart', async () => {
    await start({ retry: { maxAttempts: 1 } });
    s.rejectWith = new Error('no');
    await publish('quick');
    await publish('rejects');
    await app.worker.drain();
    await publish('quick', { held: true });
    const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 1 });
    expect(held.events).toHaveLength(1);
    await publish('quick', { waiting: true });
    expect(await app.outbox.counts()).toEqual({ pending: 1, inFlight: 1, delivered: 1, dead: 1 });
  });

  describe('publishing', () => {
    it('names the item of a publishMany call that is invalid, and only when there are several', async () => {
      await start();
      const many = await app.txHost
        .withTransaction(() => app.outbox.publishMany([{ topic: 'quick', payload: {} }, { topic: '', payload: {} }]))
        .catch((e) => e);
      expect(many).toBeInstanceOf(OutboxValidationError);
      expect(many.message).toMatch(/ \(publishMany item 1\)$/);
      const one = await app.txHost.withTransaction(() => app.outbox.publishMany([{ topic: '', payload: {} }])).catch((e) => e);
      expect(one).toBeInstanceOf(OutboxValidationError);
      expect(one.message).not.toMatch(/publishMany item/);
      const single = await app.txHost.withTransaction(() => app.outbox.publish('', {})).catch((e) => e);
      expect(single.message).not.toMatch(/publishMany item/);
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it.each([
      ['a string', 'fast', 'string'],
      ['null', null, 'null'],
      ['an array', ['key'], 'object'],
    ])('refuses %s as the options of publish or publishMany, or as an event', async (_name, value, got) => {
      await start();
      const attempts: Array<() => Promise<unknown>> = [
        () => app.outbox.publish('quick', {}, value as never),
        () => app.outbox.publishMany([{ topic: 'quick', payload: {} }], value as never),
        () => app.outbox.publishMany([value as never]),
      ];
      for (const attempt of attempts) {
        const error = await app.txHost.withTransaction(attempt).catch((e: Error) => e);
        expect(error).toBeInstanceOf(OutboxValidationError);
        expect((error as Error).message).toMatch(new RegExp(`^Invalid outbox (options|event): expected an object, got ${got}$`));
      }
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it('refuses what is not an array of events, and unknown options of publishMany', async () => {
      await start();
      const notArray = await app.txHost.withTransaction(() => app.outbox.publishMany({} as never)).catch((e) => e);
      expect(notArray).toBeInstanceOf(OutboxValidationError);
      expect(notArray.message).toBe('Invalid outbox items: publishMany expects an array of events, got object');
      const unknown = await app.txHost
        .withTransaction(() => app.outbox.publishMany([{ topic: 'quick', payload: {} }], { delay: 5 } as never))
        .catch((e) => e);
      expect(unknown).toBeInstanceOf(OutboxValidationError);
      expect(unknown.message).toMatch(/unknown option "delay"/);
      // The lists of what is allowed, in full: each name missing from one would refuse that option.
      const unknownOption = await app.txHost.withTransaction(() => app.outbox.publish('quick', {}, { delay: 5 } as never)).catch((e) => e);
      expect(unknownOption.message).toBe(
        'Invalid outbox options: unknown option "delay"; allowed: key, dedupeKey, headers, delayMs, availableAt, manager',
      );
      const unknownField = await app.txHost
        .withTransaction(() => app.outbox.publishMany([{ topic: 'quick', payload: {}, priority: 1 } as never]))
        .catch((e) => e);
      expect(unknownField.message).toBe(
        'Invalid outbox event: unknown option "priority"; allowed: topic, payload, key, dedupeKey, headers, delayMs, availableAt',
      );
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it('returns nothing and writes nothing for an empty publishMany, inside a transaction', async () => {
      await start();
      const committed = jest.fn();
      store.onCommitted(committed);
      expect(await app.txHost.withTransaction(() => app.outbox.publishMany([]))).toEqual([]);
      await expect(app.outbox.publishMany([])).rejects.toThrow(OutboxTransactionRequiredError);
      expect(await outboxRows(app)).toHaveLength(0);
      // Nothing was published, so the commit wakes no worker.
      expect(committed).not.toHaveBeenCalled();
      await publish('quick');
      expect(committed).toHaveBeenCalledTimes(1);
    });

    it('says whose manager is outside a transaction: the one passed, or the resolver’s', async () => {
      await start();
      const passed = await app.outbox.publish('quick', {}, { manager: app.dataSource.manager }).catch((e) => e);
      expect(passed).toBeInstanceOf(OutboxTransactionRequiredError);
      expect(passed.message).toMatch(/the EntityManager passed as \{ manager \} is not inside a transaction/);
      await app.dispose();

      let resolved: unknown;
      await start({ transactionResolver: () => resolved as never });
      resolved = app.dataSource.manager;
      const fromResolver = await app.outbox.publish('quick', {}).catch((e) => e);
      expect(fromResolver).toBeInstanceOf(OutboxTransactionRequiredError);
      expect(fromResolver.message).toMatch(/the transaction resolver returned an EntityManager that is not inside a transaction/);
      resolved = null;
      await expect(app.outbox.publish('quick', {})).rejects.toThrow(OutboxTransactionRequiredError);
      // The resolver is the only way in: CLS's transaction is not looked at.
      await expect(app.txHost.withTransaction(() => app.outbox.publish('quick', {}))).rejects.toThrow(
        OutboxTransactionRequiredError,
      );
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it('refuses a transaction of another DataSource', async () => {
      await start();
      const path = isSqlite(backend) ? sqliteFile() : undefined;
      const other = new DataSource({ ...typeOrmOptions(backend, app.table, path), migrations: [], migrationsRun: false } as never);
      await other.initialize();
      try {
        const error = await other.transaction((manager) => app.outbox.publish('quick', {}, { manager })).catch((e) => e);
        expect(error).toBeInstanceOf(OutboxTransactionRequiredError);
        expect(error.message).toMatch(/belongs to another DataSource than the outbox table/);
      } finally {
        await other.destroy();
        if (path) removeSqliteFile(path);
      }
      expect(await outboxRows(app)).toHaveLength(0);
    });

    describe('a dedupe key repeated in one publishMany call with other content', () => {
      it.each([
        ['topic', { topic: 'other.topic' }],
        ['key', { key: 'k2' }],
        ['payload', { payload: { n: 2 } }],
        ['headers', { headers: { h: '2' } }],
      ])('differs in its %s: refused, nothing written', async (_field, change) => {
        await start();
        const first = { topic: 'quick', payload: { n: 1 }, key: 'k1', headers: { h: '1' }, dedupeKey: 'same' };
        const error = await app.txHost
          .withTransaction(() => app.outbox.publishMany([first, { ...first, ...change }]))
          .catch((e) => e);
        expect(error).toBeInstanceOf(OutboxDedupeConflictError);
        expect(error.message).toMatch(/earlier in the same publishMany call/);
        expect(await outboxRows(app)).toHaveLength(0);
      });
    });

    describe('a dedupe key already stored with other content', () => {
      it.each([
        ['topic', { topic: 'other.topic' }],
        ['headers', { headers: { h: '2' } }],
      ])('differs in its %s: refused', async (_field, change) => {
        await start();
        const first = { topic: 'quick', payload: { n: 1 }, key: 'k1', headers: { h: '1' }, dedupeKey: 'same' };
        const { id } = (await app.txHost.withTransaction(() => app.outbox.publishMany([first])))[0];
        const error = await app.txHost
          .withTransaction(() => app.outbox.publishMany([{ ...first, ...change }]))
          .catch((e) => e);
        expect(error).toBeInstanceOf(OutboxDedupeConflictError);
        expect(error.message).toContain(id);
        expect(await outboxRows(app)).toHaveLength(1);
      });
    });

    it('finds several stored dedupe keys in one lookup, and inserts only the new one', async () => {
      await start();
      const event = (n: number, dedupeKey: string) => ({ topic: 'quick', payload: { n }, dedupeKey });
      const [a] = await app.txHost.withTransaction(() => app.outbox.publishMany([event(1, 'a')]));
      const [b] = await app.txHost.withTransaction(() => app.outbox.publishMany([event(2, 'b')]));
      const again = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([event(2, 'b'), event(1, 'a'), event(3, 'c')]),
      );
      expect(again).toEqual([
        { id: b.id, inserted: false },
        { id: a.id, inserted: false },
        { id: expect.any(String), inserted: true },
      ]);
      expect(await outboxRows(app)).toHaveLength(3);
    });

    it('writes a publishMany larger than one statement can carry, all of it', async () => {
      await start();
      // More rows than one INSERT takes on any backend (65,535 parameters, 8 per row, on PostgreSQL).
      const total = 8300;
      const results = await app.txHost.withTransaction(() =>
        app.outbox.publishMany(Array.from({ length: total }, (_, n) => ({ topic: 'quick', payload: { n } }))),
      );
      expect(new Set(results.map((r) => r.id)).size).toBe(total);
      const rows = await app.raw.query<{ payload: unknown }>(`SELECT "payload" FROM "${app.table}"`);
      const numbers = rows.map((r) => (typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload).n);
      expect(numbers.sort((a: number, b: number) => a - b)).toEqual(Array.from({ length: total }, (_, n) => n));
    });
  });
});
