import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { runInNewContext } from 'node:vm';
import type { Logger as TypeOrmLogger } from 'typeorm';
import {
  OutboxHandler,
  OutboxHandlerTimeoutError,
  OutboxNonRetryableError,
  OutboxRetryLaterError,
  type OutboxMessage,
} from '../../../lib';
import { OUTBOX_STORE } from '../../../lib/outbox.constants';
import type { OutboxStore } from '../../../lib/store/outbox.store';
import { backends, type BackendName, rawDb } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, onMariadb, outboxRows, type TestApp, type TestAppOptions } from '../../fixtures/test-app';

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

/** Handlers whose behaviour each test sets through `Behaviour.next`. */
@Injectable()
class Behaviour {
  calls: Array<{ handler: string; message: OutboxMessage }> = [];
  flaky = new Map<string, number>();
  gate = deferred();
  entered = deferred();
  running = 0;
  maxRunning = 0;
  reject: unknown = 'a string';
  seenSignal: AbortSignal | undefined;
  trace: string[] = [];
  seen: Array<{ handler: string; payload: unknown; headers: Record<string, string> }> = [];
  readSignal = deferred<AbortSignal>();
  stallMs = 0;
  throwAfterStall = false;
  started: string[] = [];
  /** What the 'sabotage' handler does before it returns or throws. */
  sabotage: () => Promise<unknown> = () => Promise.resolve();
  sabotageThenThrow = false;
  /** Ids in the order the 'paced' handler ran them. */
  paced: string[] = [];
}

@Injectable()
class Handlers {
  constructor(private readonly b: Behaviour) {}

  @OutboxHandler('multi')
  first(m: OutboxMessage) {
    this.b.calls.push({ handler: 'first', message: m });
  }

  @OutboxHandler('multi')
  second(m: OutboxMessage) {
    this.b.calls.push({ handler: 'second', message: m });
    if (m.attempt === 1) throw new Error('second fails once');
  }

  @OutboxHandler('always.fails')
  alwaysFails(m: OutboxMessage) {
    this.b.calls.push({ handler: 'alwaysFails', message: m });
    throw new Error(`boom ${m.attempt}`);
  }

  @OutboxHandler('poison')
  poison(m: OutboxMessage) {
    this.b.calls.push({ handler: 'poison', message: m });
    throw new OutboxNonRetryableError('payload can never be processed');
  }

  @OutboxHandler('odd.rejection')
  async odd(m: OutboxMessage) {
    this.b.calls.push({ handler: 'odd', message: m });
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- deliberate: rejecting with a non-Error is what the test records
    return Promise.reject(this.b.reject);
  }

  @OutboxHandler('slow', { timeoutMs: 50 })
  async slow(m: OutboxMessage) {
    this.b.seenSignal = m.signal;
    await new Promise((resolve) => m.signal.addEventListener('abort', resolve));
  }

  @OutboxHandler('blocking')
  async blocking(m: OutboxMessage) {
    this.b.calls.push({ handler: 'blocking', message: m });
    this.b.running++;
    this.b.maxRunning = Math.max(this.b.maxRunning, this.b.running);
    this.b.entered.resolve();
    await this.b.gate.promise;
    this.b.running--;
  }

  @OutboxHandler('traced')
  async traced(m: OutboxMessage) {
    this.b.trace.push(`start ${m.id}`);
    // Yields to the event loop, so handlers of one batch overlap.
    await new Promise((resolve) => setImmediate(resolve));
    this.b.trace.push(`end ${m.id}`);
  }

  @OutboxHandler('plain')
  plain(m: OutboxMessage) {
    this.b.calls.push({ handler: 'plain', message: m });
  }

  @OutboxHandler('takes.450ms')
  async takes450(m: OutboxMessage) {
    this.b.calls.push({ handler: 'takes450', message: m });
    // Simulated work, not a wait for an event: long enough to use up most of a 1 s lease.
    await new Promise((resolve) => setTimeout(resolve, 450));
  }

  @OutboxHandler('rejects')
  async rejects() {
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- deliberate: the tests reject with non-Errors (strings, undefined, objects) too
    return Promise.reject(this.b.reject);
  }

  @OutboxHandler('copied')
  meddler(m: OutboxMessage) {
    this.b.seen.push({ handler: 'meddler', payload: structuredClone(m.payload), headers: { ...m.headers } });
    (m.payload as { items: string[] }).items.push('added by meddler');
    m.headers['x-meddled'] = 'yes';
  }

  @OutboxHandler('copied')
  bystander(m: OutboxMessage) {
    this.b.seen.push({ handler: 'bystander', payload: structuredClone(m.payload), headers: { ...m.headers } });
  }

  @OutboxHandler('late.signal', { timeoutMs: 50 })
  async lateSignal(m: OutboxMessage) {
    // Never touches the signal until the worker has given up on this call.
    await this.b.gate.promise;
    this.b.readSignal.resolve(m.signal);
  }

  @OutboxHandler('retry.later')
  retryLater(m: OutboxMessage) {
    throw new OutboxRetryLaterError('rate limited', (m.payload as { afterMs: number }).afterMs);
  }

  /** Stalls (and maybe throws) once; succeeds at once afterwards. */
  @OutboxHandler('stalls')
  stalls() {
    const ms = this.b.stallMs;
    if (ms === 0) return;
    this.b.stallMs = 0;
    stall(ms);
    if (this.b.throwAfterStall) throw new Error('failed after the stall');
  }

  @OutboxHandler('parallel')
  async parallel(m: OutboxMessage) {
    this.b.started.push(m.id);
    this.b.running++;
    this.b.maxRunning = Math.max(this.b.maxRunning, this.b.running);
    await this.b.gate.promise;
    this.b.running--;
  }

  /** By call: the first returns at once, the second takes 300 ms of simulated work, the third waits for the gate. */
  @OutboxHandler('paced')
  async paced(m: OutboxMessage) {
    const call = this.b.paced.push(m.id);
    if (call === 2) await new Promise((resolve) => setTimeout(resolve, 300));
    if (call === 3) await this.b.gate.promise;
  }

  @OutboxHandler('sabotage')
  async sabotageStore() {
    await this.b.sabotage();
    if (this.b.sabotageThenThrow) throw new Error('handler failed too');
  }
}

/** A time long past, as each backend stores times. */
const PAST: Record<BackendName, string> = {
  postgres: "'2020-01-01T00:00:00Z'",
  mariadb: "'2020-01-01 00:00:00'",
  sqlite3: "'2020-01-01T00:00:00.000Z'",
  'better-sqlite3': "'2020-01-01T00:00:00.000Z'",
};

describe.each(backends())('worker on %s', (backend) => {
  let app: TestApp;
  let b: Behaviour;
  let store: OutboxStore;

  async function start(outbox: TestAppOptions['outbox'] = {}, extra: Partial<TestAppOptions> = {}) {
    app = await createTestApp({
      backend,
      providers: [Behaviour, Handlers],
      outbox: { retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 }, ...outbox },
      ...extra,
    });
    b = app.module.get(Behaviour);
    store = app.module.get(OUTBOX_STORE);
  }
  afterEach(() => app?.dispose());

  const publish = (topic: string, payload: unknown = {}, options = {}) =>
    app.txHost.withTransaction(() => app.outbox.publish(topic, payload, options));
  const row = async (id: string) => (await outboxRows(app)).find((r) => r.id === id)!;

  it('logs one line per registered handler', async () => {
    await start();
    expect(app.logger.matching(/^Outbox handler Handlers\.first \{multi\}$/)).toHaveLength(1);
    // Every method of Handlers is a handler of one topic.
    const methods = Object.getOwnPropertyNames(Handlers.prototype).filter((name) => name !== 'constructor');
    expect(app.logger.matching(/^Outbox handler /)).toHaveLength(methods.length);
  });

  it('records each handler of a topic on its own: a retry runs only the one that failed', async () => {
    await start();
    const { id } = await publish('multi', { n: 1 });
    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 1, failed: 1 });
    expect(b.calls.map((c) => `${c.handler}@${c.message.attempt}`)).toEqual(['first@1', 'second@1', 'second@2']);
    const stored = await row(id);
    expect(stored.status).toBe('delivered');
    expect(stored.attempts).toBe(2);
  });

  it('gives every handler of a topic its own copy of the payload and headers', async () => {
    await start();
    await publish('copied', { items: ['a'] }, { headers: { 'x-trace': 't' } });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(b.seen).toHaveLength(2);
    for (const seen of b.seen) {
      expect(seen.payload).toEqual({ items: ['a'] });
      expect(seen.headers).toEqual({ 'x-trace': 't' });
    }
  });

  it('retries with backoff, then dead-letters after maxAttempts and logs it', async () => {
    await start();
    const { id } = await publish('always.fails');
    const result = await app.worker.drain();
    expect(result).toMatchObject({ failed: 2, deadLettered: 1 });
    expect(b.calls.map((c) => c.message.attempt)).toEqual([1, 2, 3]);
    const stored = await row(id);
    expect(stored).toMatchObject({ status: 'dead', attempts: 3, claim_token: null });
    expect(stored.last_error).toMatch(/alwaysFails: Error: boom 3/);
    expect(stored.processed_at).not.toBeNull();
    expect(
      app.logger.matching(new RegExp(`Dead-lettered outbox event ${id} \\(always.fails\\) after attempt 3`)),
    ).toHaveLength(1);
    expect(
      app.logger.matching(/attempt [12] of 3 failed; retrying in \d+ ms or later: Handlers.alwaysFails: Error: boom/),
    ).toHaveLength(2);
  });

  it('waits out the backoff by the database clock', async () => {
    await start({ retry: { maxAttempts: 5, initialDelayMs: 60_000, maxDelayMs: 60_000 } });
    // Pin the jitter draw to the middle of the range: the delay is then exactly 30 s.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.5);
    try {
      const { id } = await publish('always.fails');
      await app.worker.drain();
      const dueIn = DUE_IN_MS[backend];
      const [{ due_in_ms }] = await app.raw.query<{ due_in_ms: number }>(
        `SELECT ${dueIn} AS due_in_ms FROM "${app.table}" WHERE "id" = ?`,
        [id],
      );
      // Rounded: SQLite's julianday arithmetic is floating point, and a fast run reads the clock in
      // the same millisecond the failure was written (30000.00004 is 30 s).
      expect(Math.round(Number(due_in_ms))).toBeGreaterThan(25_000);
      expect(Math.round(Number(due_in_ms))).toBeLessThanOrEqual(30_000);
      expect(await row(id)).toMatchObject({ status: 'pending', claim_token: null, attempts: 1 });
      // Not due yet: a drain leaves it alone.
      await app.worker.drain();
      expect(b.calls).toHaveLength(1);
    } finally {
      random.mockRestore();
    }
  });

  it('fails an event whose topic has no handler, retries it, and dead-letters it', async () => {
    await start();
    const { id } = await publish('nobody.listens');
    const result = await app.worker.drain();
    expect(result).toMatchObject({ failed: 2, deadLettered: 1 });
    const stored = await row(id);
    expect(stored.status).toBe('dead');
    expect(stored.attempts).toBe(3);
    expect(stored.last_error).toBe('no handler or route for topic "nobody.listens" in this application');
  });

  it('dead-letters at once on OutboxNonRetryableError', async () => {
    await start();
    const { id } = await publish('poison');
    await app.worker.drain();
    expect(b.calls).toHaveLength(1);
    expect(await row(id)).toMatchObject({ status: 'dead', attempts: 1 });
    expect(app.logger.matching(/\(non-retryable\)/)).toHaveLength(1);
  });

  it.each([['a string'], [undefined], [{ code: 42 }]])(
    'records a non-Error rejection (%p) as a failure and leaves nothing leased',
    async (value) => {
      await start({ retry: { maxAttempts: 1 } });
      b.reject = value;
      const { id } = await publish('odd.rejection');
      expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
      const stored = await row(id);
      expect(stored).toMatchObject({ status: 'dead', claim_token: null });
      expect(stored.last_error).toContain('non-Error rejection:');
      // The worker keeps working afterwards.
      await publish('plain');
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    },
  );

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
      b.reject = value;
      const { id } = await publish('rejects');
      expect(await app.worker.drain()).toEqual({
        delivered: 0,
        failed: 0,
        deadLettered: 1,
        released: 0,
        lostLeases: 0,
      });
      expect((await row(id)).last_error).toBe(`Handlers.rejects: ${text}`);
    });

    it('waits as long as the longest Retry-After a handler asks for, capped at one day', async () => {
      await start({ retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 } });
      const soon = await publish('retry.later', { afterMs: 120_000 });
      const never = await publish('retry.later', { afterMs: 30 * 86_400_000 });
      expect(await app.worker.drain()).toMatchObject({ failed: 2, deadLettered: 0 });
      const dueInMs = async (id: string) => {
        const [{ ms }] = await app.raw.query<{ ms: number }>(
          `SELECT ${DUE_IN_MS[backend]} AS ms FROM "${app.table}" WHERE "id" = ?`,
          [id],
        );
        return Number(ms);
      };
      expect(await dueInMs(soon.id)).toBeGreaterThan(100_000);
      expect(await dueInMs(soon.id)).toBeLessThan(120_001);
      expect(await dueInMs(never.id)).toBeGreaterThan(86_400_000 - 20_000);
      expect(await dueInMs(never.id)).toBeLessThan(86_400_001);
      expect(
        app.logger.matching(/attempt 1 of 5 failed; retrying in 120000 ms or later: Handlers.retryLater: /),
      ).toHaveLength(1);
      expect(app.logger.matching(/attempt 1 of 5 failed; retrying in 86400000 ms or later/)).toHaveLength(1);
    });
  });

  it('times a handler out, aborts its signal and records the failure', async () => {
    await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('slow');
    await app.worker.drain();
    expect(b.seenSignal?.aborted).toBe(true);
    expect((await row(id)).last_error).toMatch(/did not finish within its timeout of 50 ms/);
  });

  it('hands a handler that reads its signal only after its timeout a signal already aborted, with the timeout as reason', async () => {
    await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('late.signal');
    expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
    expect((await row(id)).last_error).toBe(
      'Handlers.lateSignal: OutboxHandlerTimeoutError: handler did not finish within its timeout of 50 ms',
    );
    b.gate.resolve();
    const signal = await b.readSignal.promise;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(OutboxHandlerTimeoutError);
    expect(signal.reason).toMatchObject({
      timeoutMs: 50,
      message: 'handler did not finish within its timeout of 50 ms',
    });
  });

  it('counts the attempt at claim: an abandoned claim is retried with attempt 2 after its lease', async () => {
    await start({ worker: { leaseMs: 1000 } });
    const { id } = await publish('plain');
    const abandoned = await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 3 });
    expect(abandoned.events.map((e) => [e.id, e.attempts])).toEqual([[id, 1]]);
    // Leased: nothing to claim until the lease expires by the database clock.
    expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
    await eventually(async () => (await app.worker.drain()).delivered === 1, 10_000, 'lease expiry');
    expect(b.calls.map((c) => c.message.attempt)).toEqual([2]);
    expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 2 });
  });

  it('dead-letters an event whose final attempt was abandoned (the worker died)', async () => {
    await start({ worker: { leaseMs: 1000 }, retry: { maxAttempts: 1 } });
    const { id } = await publish('plain');
    await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 1 });
    await eventually(async () => (await app.worker.drain()).deadLettered === 1, 10_000, 'lease expiry');
    expect(b.calls).toHaveLength(0);
    const stored = await row(id);
    expect(stored).toMatchObject({ status: 'dead', attempts: 1, claim_token: null });
    expect(stored.note).toMatch(/attempt 1 of 1 did not finish before its lease expired/);
    expect(app.logger.matching(/Dead-lettered outbox event/)).toHaveLength(1);
  });

  it('rejects a late acknowledgement, failure or release after the lease expired and changes nothing', async () => {
    await start();
    const { id } = await publish('plain');
    const first = await store.claim({ batchSize: 1, leaseMs: 1000, maxAttempts: 3 });
    const second = await eventually(
      async () => {
        const claim = await store.claim({ batchSize: 1, leaseMs: 60_000, maxAttempts: 3 });
        return claim.events.length ? claim : undefined;
      },
      10_000,
      'lease expiry',
    );
    expect(second.token).not.toBe(first.token);
    const before = await row(id);
    expect(before).toMatchObject({ status: 'pending', attempts: 2, claim_token: second.token });

    expect(await store.acknowledge([id], first.token)).toBe(0);
    expect(
      await store.fail(id, first.token, { error: 'late', completedHandlers: [], deadLetter: true, retryDelayMs: 0 }),
    ).toBe(false);
    expect(await store.release(id, first.token, true)).toBe(false);
    expect(await row(id)).toEqual(before);

    expect(await store.acknowledge([id], second.token)).toBe(1);
    expect((await row(id)).status).toBe('delivered');
    // Acknowledged means never claimable again.
    expect((await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 3 })).events).toHaveLength(0);
  });

  it('runs each event whose last attempt outlived its lease alone, after the rest of its batch', async () => {
    await start({ worker: { concurrency: 10 } });
    const items = (n: number) => Array.from({ length: n }, (_, i) => ({ topic: 'traced', payload: { i } }));
    const cut = await app.txHost.withTransaction(() => app.outbox.publishMany(items(3)));
    // A worker claims them and dies: nothing is recorded, and their short leases run out.
    await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 3 });
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    const fresh = await app.txHost.withTransaction(() => app.outbox.publishMany(items(3)));

    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 6, failed: 0, deadLettered: 0 });
    // One claim takes all six: the fresh three run together, then one suspect alone; the other two go
    // back uncounted and come one per claim.
    expect(result.released).toBe(3);
    const overlapped = (id: string) => b.trace.indexOf(`end ${id}`) - b.trace.indexOf(`start ${id}`) > 1;
    expect(fresh.every((e) => overlapped(e.id))).toBe(true);
    expect(cut.some((e) => overlapped(e.id))).toBe(false);
    const firstSuspect = Math.min(...cut.map((e) => b.trace.indexOf(`start ${e.id}`)));
    expect(Math.max(...fresh.map((e) => b.trace.indexOf(`end ${e.id}`)))).toBeLessThan(firstSuspect);
    for (const { id } of cut) {
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 2 });
      expect((await row(id)).note).toMatch(/^attempt 1 of 3 did not finish before its lease expired/);
      expect(await row(id)).toMatchObject({ last_error: null, last_expired_attempt: 1 });
    }
    for (const { id } of fresh)
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, last_error: null });
    expect(
      app.logger.matching(/: attempt 1 did not finish before its lease expired; running attempt 2 alone$/),
    ).toHaveLength(3);
  });

  describe('a lease that ran out while the process stalled', () => {
    // RELIABILITY 33: a lease's expiry makes the event claimable; only another claim voids the outcome.
    it('still records the outcome when no other claim took the event: delivered once, attempt 1', async () => {
      await start({ worker: { leaseMs: 1000 } });
      b.stallMs = 1500;
      const { id } = await publish('stalls');
      expect(await app.worker.drain()).toEqual({
        delivered: 1,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 0,
      });
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, expired_attempts: 0, note: null });
      expect(app.logger.matching(/rejected/)).toEqual([]);
    });

    /**
     * The handler's first call makes its event another claim's, as a worker that found the lease expired
     * does, and (with `thenThrow`) fails; later calls succeed.
     */
    const takenMeanwhile = (thenThrow: boolean) => {
      let calls = 0;
      const expire = (id: string) =>
        app.raw.query(`UPDATE "${app.table}" SET "available_at" = ${PAST[backend]} WHERE "id" = ?`, [id]);
      b.sabotage = async () => {
        calls++;
        b.sabotageThenThrow = thenThrow && calls === 1;
        if (calls > 1) return;
        const [{ id }] = await app.raw.query<{ id: string }>(
          `SELECT "id" FROM "${app.table}" WHERE "topic" = 'sabotage'`,
        );
        await expire(id);
        const other = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 5 });
        expect(other.events.map((e) => e.id)).toEqual([id]);
        // ...and then died: its lease is over at once, so the drain takes the event again.
        await expire(id);
      };
    };

    it('counts a rejected acknowledgement as a lost lease when another claim took the event; the next claim delivers it', async () => {
      await start({ worker: { leaseMs: 1000 }, retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 } });
      takenMeanwhile(false);
      const { id } = await publish('sabotage');
      expect(await app.worker.drain()).toEqual({
        delivered: 1,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 1,
      });
      expect(
        app.logger.matching(
          /^Outbox acknowledgement of 1 of 1 event\(s\) rejected: their lease expired and another claim took/,
        ),
      ).toHaveLength(1);
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 3 });
    });

    it('counts a rejected failure as a lost lease and records none of it', async () => {
      await start({ worker: { leaseMs: 1000 }, retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 } });
      takenMeanwhile(true);
      const { id } = await publish('sabotage');
      expect(await app.worker.drain()).toEqual({
        delivered: 1,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 1,
      });
      expect(
        app.logger.matching(
          new RegExp(`^Outbox failure of event ${id} rejected: its lease expired and another claim took it`),
        ),
      ).toHaveLength(1);
      const stored = await row(id);
      expect(stored).toMatchObject({ status: 'delivered', attempts: 3 });
      // The rejected failure wrote nothing: no error, only the claims' notes of the expired attempts.
      expect(stored.last_error).toBeNull();
      expect(stored.note).toMatch(/did not finish before its lease expired/);
    });
  });

  it('counts the suspects it could not give back as lost leases, when another claim took them while the process stalled', async () => {
    // Without renewal: with it, a renewal may find the third one's lease lost before its start is refused.
    await start({
      worker: { leaseMs: 1000, concurrency: 10, renewLease: false },
      retry: { maxAttempts: 10, initialDelayMs: 0, maxDelayMs: 0 },
    });
    const cut = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'plain', payload: { n } }))),
    );
    // A worker claims all three and dies; their leases run out, so all three are suspects next time.
    await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 10 });
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    // The process stalls right after the next claim, past that claim's lease, before it gives the two
    // suspects back, and meanwhile another worker claims all three (and dies too): the release is
    // rejected, and so is the start of the third (its lease is gone too).
    const releaseMany = store.releaseMany.bind(store);
    let stalled = false;
    jest.spyOn(store, 'releaseMany').mockImplementation(async (ids, token, uncount) => {
      if (!stalled) {
        stalled = true;
        stall(1100);
        const expireAll = () =>
          app.raw.query(`UPDATE "${app.table}" SET "available_at" = ${PAST[backend]} WHERE "status" = 'pending'`);
        await expireAll();
        expect((await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 10 })).events).toHaveLength(3);
        await expireAll();
      }
      return releaseMany(ids, token, uncount);
    });
    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 3, failed: 0, deadLettered: 0, lostLeases: 3 });
    expect(app.logger.matching(/^Outbox release of event .* rejected: its lease expired/)).toHaveLength(1);
    for (const { id } of cut) expect((await row(id)).status).toBe('delivered');
  });

  describe('a database error while the worker records', () => {
    const dropOutbox = () => app.raw.query(`DROP TABLE "${app.table}"`);

    it('a claim: logged, and the drain ends with nothing done', async () => {
      await start();
      await dropOutbox();
      expect(await app.worker.drain()).toEqual({
        delivered: 0,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 0,
      });
      expect(app.logger.matching(/^Outbox claim failed; will retry at the next poll: QueryFailedError: /)).toHaveLength(
        1,
      );
    });

    it('an acknowledgement: logged with the event, left to the lease', async () => {
      await start();
      b.sabotage = dropOutbox;
      const { id } = await publish('sabotage');
      expect(await app.worker.drain()).toEqual({
        delivered: 0,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 0,
      });
      expect(
        app.logger.matching(
          new RegExp(`^Outbox acknowledgement of event ${id} failed; its lease will expire: QueryFailedError: `),
        ),
      ).toHaveLength(1);
    });

    it('a failure: logged with the event, left to the lease', async () => {
      await start();
      b.sabotage = dropOutbox;
      b.sabotageThenThrow = true;
      const { id } = await publish('sabotage');
      // A database error is not a lost lease: nothing is counted, for a failure as for an acknowledgement.
      expect(await app.worker.drain()).toEqual({
        delivered: 0,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 0,
      });
      expect(
        app.logger.matching(
          new RegExp(`^Outbox failure of event ${id} failed; its lease will expire: QueryFailedError: `),
        ),
      ).toHaveLength(1);
    });

    it('a release: logged with the event, not counted', async () => {
      await start({
        worker: { leaseMs: 1000, handlerTimeoutMs: 500, concurrency: 1, batchSize: 2, renewLease: false },
      });
      // The first handler drops the table and uses 450 ms of the 1 s lease: the second event cannot fit
      // its 500 ms timeout in what is left, and its release meets the missing table.
      b.sabotage = async () => {
        b.sabotage = () => Promise.resolve();
        await dropOutbox();
        await new Promise((resolve) => setTimeout(resolve, 450));
      };
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany([1, 2].map((n) => ({ topic: 'sabotage', payload: { n } }))),
      );
      expect(await app.worker.drain()).toEqual({
        delivered: 0,
        failed: 0,
        deadLettered: 0,
        released: 0,
        lostLeases: 0,
      });
      expect(
        app.logger.matching(/^Outbox release of event \S+ failed; its lease will expire: \w+Error: /),
      ).toHaveLength(1);
    });
  });

  it('drains back to back while batches come back full, from a single poll', async () => {
    await start();
    const total = 23;
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: total }, (_, n) => ({ topic: 'plain', payload: { n } }))),
    );
    // A second application on the same database whose worker polls once at bootstrap, then not for an hour.
    const second = await createTestApp({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      providers: [Behaviour, Handlers],
      outbox: { worker: { enabled: true, pollIntervalMs: 3_600_000, batchSize: 5 } },
    });
    try {
      await eventually(async () => (await second.outbox.counts()).delivered === total, 10_000, 'all delivered');
      expect(second.module.get(Behaviour).calls).toHaveLength(total);
    } finally {
      await second.close();
      await second.raw.close();
    }
  });

  it('gives back, uncounted, an event whose lease has too little time left to start it', async () => {
    // Without renewal (see lease-renewal.e2e-spec.ts for the same claim with it).
    await start({ worker: { leaseMs: 1000, concurrency: 1, batchSize: 3, renewLease: false } });
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2].map((n) => ({ topic: 'takes.450ms', payload: { n } }))),
    );
    const result = await app.worker.drain();
    // Each claim runs its first event, which takes 450 ms of the 1 s lease; the others cannot fit their
    // 500 ms timeout in what is left and go back: two from the first claim, one from the second.
    expect(result.released).toBe(3);
    expect(result.delivered).toBe(3);
    const rows = await outboxRows(app);
    expect(rows.map((r) => [r.status, r.attempts])).toEqual(published.map(() => ['delivered', 1]));
  });

  it('acknowledges the finished events of a batch while one of its handlers is still running', async () => {
    await start({ worker: { concurrency: 10 } });
    const { id: slowId } = await publish('blocking');
    const fast = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 9 }, (_, n) => ({ topic: 'plain', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await b.entered.promise;
    // The nine lanes that finished are idle from here on; the batch's own timer writes their successes.
    await eventually(
      async () => {
        const rows = await outboxRows(app);
        return fast.every(({ id }) => rows.find((r) => r.id === id)?.status === 'delivered');
      },
      10_000,
      'the nine fast events acknowledged',
    );
    expect(b.running).toBe(1);
    expect(await row(slowId)).toMatchObject({ status: 'pending' });
    b.gate.resolve();
    expect(await draining).toMatchObject({ delivered: 10 });
    expect(await row(slowId)).toMatchObject({ status: 'delivered', claim_token: null });
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
      app.outbox.publishMany([1, 2, 3, 4, 5].map((n) => ({ topic: 'plain', payload: { n } }))),
    );
    statements.length = 0;
    expect(await app.worker.drain()).toMatchObject({ delivered: 5 });
    expect(statements.filter((q) => /^\s*UPDATE .*'delivered'/s.test(q))).toHaveLength(1);
  });

  it('acknowledges the successes of a slow batch while the batch still runs', async () => {
    await start({ worker: { batchSize: 3, concurrency: 1 } });
    // One at a time: a quick one, one whose work outlasts the 250 ms flush interval, one held open.
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'paced', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await eventually(() => b.paced.length === 3, 10_000, 'the third handler running');
    const [quick, slow, held] = b.paced;
    await eventually(
      async () => (await outboxRows(app)).filter((r) => r.status === 'delivered').length === 2,
      10_000,
      'the first two acknowledged while the third runs',
    );
    expect((await row(quick)).status).toBe('delivered');
    expect((await row(slow)).status).toBe('delivered');
    expect((await row(held)).status).toBe('pending');
    b.gate.resolve();
    expect(await draining).toEqual({ delivered: 3, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 });
  });

  it('never overlaps itself: a second drain waits for the first', async () => {
    await start({ worker: { concurrency: 1, batchSize: 1 } });
    await publish('blocking', { n: 1 });
    await publish('blocking', { n: 2 });
    const firstDrain = app.worker.drain();
    await b.entered.promise;
    let secondSettled = false;
    const secondDrain = app.worker.drain().then((r) => ((secondSettled = true), r));
    // Real database round trips while the first handler is held: the second drain must not start.
    for (let i = 0; i < 5; i++) await app.outbox.counts();
    expect(b.calls).toHaveLength(1);
    expect(secondSettled).toBe(false);
    b.gate.resolve();
    const [r1, r2] = await Promise.all([firstDrain, secondDrain]);
    expect(r1.delivered + r2.delivered).toBe(2);
    expect(b.maxRunning).toBe(1);
    expect(new Set(b.calls.map((c) => c.message.id)).size).toBe(2);
  });

  it('runs as many handlers at once as `concurrency`, and no more', async () => {
    await start({ worker: { concurrency: 2, batchSize: 10 } });
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'parallel', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await eventually(() => b.running === 2, 10_000, 'two handlers running');
    // Real round trips while both are held: a third must not start.
    for (let i = 0; i < 3; i++) await app.outbox.counts();
    expect(b.started).toHaveLength(2);
    b.gate.resolve();
    expect(await draining).toMatchObject({ delivered: 3 });
    expect(b.maxRunning).toBe(2);
  });

  it.each([
    ['with ScheduleModule imported by the app', true],
    ['without ScheduleModule', false],
  ])('polls on its own schedule %s', async (_name, withSchedule) => {
    await start({ worker: { enabled: true, pollIntervalMs: 20 } }, { withSchedule });
    if (withSchedule) {
      expect(app.module.get(SchedulerRegistry).getIntervals()).toContain(`outbox-worker:${app.table}`);
    }
    const { id } = await publish('plain');
    await eventually(() => b.calls.some((c) => c.message.id === id), 10_000, 'scheduled delivery');
    await eventually(async () => (await row(id)).status === 'delivered', 10_000, 'acknowledgement');
  });

  it('counts pending, in-flight, delivered and dead events apart', async () => {
    await start({ retry: { maxAttempts: 1 } });
    b.reject = new Error('no');
    await publish('plain');
    await publish('rejects');
    await app.worker.drain();
    await publish('plain', { held: true });
    const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 1 });
    expect(held.events).toHaveLength(1);
    await publish('plain', { waiting: true });
    expect(await app.outbox.counts()).toEqual({ pending: 1, due: 1, scheduled: 0, inFlight: 1, delivered: 1, dead: 1 });
  });

  it('tells due pending events from scheduled ones (delayed, or backing off after a failure)', async () => {
    // A delay of up to a day (full jitter): the failed event is still backing off when counted.
    await start({ retry: { maxAttempts: 3, initialDelayMs: 86_400_000, maxDelayMs: 86_400_000 } });
    b.reject = new Error('no');
    await publish('rejects');
    expect(await app.worker.drain()).toMatchObject({ failed: 1 });
    await publish('plain', { delayed: true }, { delayMs: 60_000 });
    await publish('plain', { due: true });
    const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 3 });
    expect(held.events).toHaveLength(1);
    await publish('plain', { due: true });
    expect(await app.outbox.counts()).toEqual({ pending: 3, due: 1, scheduled: 2, inFlight: 1, delivered: 0, dead: 0 });
  });

  it('keeps delivering when the database clock is the only clock: the app clock shifted ±10 minutes changes nothing', async () => {
    await start();
    const RealDate = Date;
    const shift = (offsetMs: number) => {
      class ShiftedDate extends RealDate {
        constructor(...args: unknown[]) {
          if (args.length === 0) super(RealDate.now() + offsetMs);
          else super(...(args as [number]));
        }
        static override now() {
          return RealDate.now() + offsetMs;
        }
      }
      global.Date = ShiftedDate as DateConstructor;
    };
    try {
      // Published with a 60 s delay while the app clock runs 10 minutes ahead: still not due.
      shift(10 * 60_000);
      const immediate = await publish('plain', { delayed: false });
      await app.txHost.withTransaction(() => app.outbox.publish('plain', { delayed: true }, { delayMs: 60_000 }));
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
      expect(b.calls.map((c) => c.message.id)).toEqual([immediate.id]);
      // A live lease is not stolen by a worker whose clock runs 10 minutes ahead.
      const { id } = await publish('plain');
      shift(0);
      const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 3 });
      expect(held.events.map((e) => e.id)).toContain(id);
      shift(10 * 60_000);
      expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
      shift(-10 * 60_000);
      expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
      expect((await app.outbox.counts()).pending).toBe(1);
    } finally {
      global.Date = RealDate;
    }
  });
});

/** Records the driver errors TypeORM logs, so a test can wait for one. */
class ErrorLog implements TypeOrmLogger {
  errors: unknown[] = [];
  logQueryError(error: unknown) {
    this.errors.push(error);
  }
  logQuery() {}
  logQuerySlow() {}
  logSchemaBuild() {}
  logMigration() {}
  log() {}
}

onMariadb('the worker’s writes under InnoDB row locks on MariaDB', ({ admin, disposeAfter }) => {
  let app: TestApp;

  it('fenced writes by id lock no row they do not change: a producer holding an uncommitted delayed event blocks none of them (REPEATABLE READ)', async () => {
    app = disposeAfter(await createTestApp({ backend: 'mariadb' }));
    const store = app.module.get<OutboxStore>(OUTBOX_STORE);
    const ids = (
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany(Array.from({ length: 12 }, (_, n) => ({ topic: 'plain', payload: { n } }))),
      )
    ).map((r) => r.id);
    const { token } = await store.claim({ batchSize: 12, leaseMs: 60_000, maxAttempts: 5 });

    // The application's transaction, at the server's default isolation, has inserted an event due in
    // a minute — inside the range the lease condition covers — and has not committed yet.
    const producer = await rawDb('mariadb');
    try {
      await producer.query('START TRANSACTION');
      await producer.query(
        `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "available_at", "completed_handlers", "created_at")
         VALUES (UUID(), 'plain', '{}', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, '[]', UTC_TIMESTAMP(6))`,
      );
      const failure = { error: 'x', completedHandlers: [], deadLetter: false, retryDelayMs: 0 };
      const writes = [
        () => store.acknowledge(ids.slice(0, 10), token),
        () => store.fail(ids[10], token, failure),
        () => store.release(ids[11], token, true),
      ];
      for (const write of writes) {
        let settled = false;
        const done = write().finally(() => (settled = true));
        // Through the claim index, the write stalled here until the producer ended (it shows as
        // "Updating", not as a lock wait); by primary key it finishes at once.
        await eventually(() => settled, 10_000, 'the write to finish while the producer transaction is open');
        await done;
      }
      expect(
        (await outboxRows(app))
          .filter((r) => ids.includes(String(r.id)))
          .map((r) => r.status)
          .sort(),
      ).toEqual([...Array<string>(10).fill('delivered'), 'pending', 'pending']);
    } finally {
      await producer.query('ROLLBACK');
      await producer.close();
    }
  });

  it('retries an acknowledgement that hit a lock wait timeout (1205) instead of failing it', async () => {
    const [{ wait }] = await admin().query<{ wait: number }>('SELECT @@GLOBAL.innodb_lock_wait_timeout AS wait');
    await admin().query('SET GLOBAL innodb_lock_wait_timeout = 1');
    const errors = new ErrorLog();
    const locker = await rawDb('mariadb');
    try {
      app = disposeAfter(await createTestApp({ backend: 'mariadb', typeormLogger: errors }));
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish('plain', {}));
      const store = app.module.get<OutboxStore>(OUTBOX_STORE);
      const { token } = await store.claim({ batchSize: 1, leaseMs: 60_000, maxAttempts: 5 });

      // Another session holds the row lock, so the acknowledgement waits and times out...
      await locker.query('START TRANSACTION');
      await locker.query(`SELECT "id" FROM "${app.table}" WHERE "id" = ? FOR UPDATE`, [id]);
      const acknowledged = store.acknowledge([id], token);
      await eventually(
        () =>
          errors.errors.some((e) => {
            const error = e as { errno?: number; driverError?: { errno?: number } };
            return (error.errno ?? error.driverError?.errno) === 1205;
          }),
        20_000,
        'a lock wait timeout',
      );
      // ...and once the lock is gone, the retried statement goes through.
      await locker.query('COMMIT');
      await expect(acknowledged).resolves.toBe(1);
      expect((await outboxRows(app)).find((r) => r.id === id)).toMatchObject({ status: 'delivered' });
    } finally {
      await locker.close();
      await admin().query('SET GLOBAL innodb_lock_wait_timeout = ?', [wait]);
    }
  });
});
