import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { OutboxHandler, OutboxNonRetryableError, type OutboxMessage } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { backends } from '../fixtures/backends';
import { deferred, eventually } from '../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../fixtures/test-app';

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
}

@Injectable()
class Handlers {
  constructor(private readonly b: Behaviour) {}

  @OutboxHandler('multi')
  async first(m: OutboxMessage) {
    this.b.calls.push({ handler: 'first', message: m });
  }

  @OutboxHandler('multi')
  async second(m: OutboxMessage) {
    this.b.calls.push({ handler: 'second', message: m });
    if (m.attempt === 1) throw new Error('second fails once');
  }

  @OutboxHandler('always.fails')
  async alwaysFails(m: OutboxMessage) {
    this.b.calls.push({ handler: 'alwaysFails', message: m });
    throw new Error(`boom ${m.attempt}`);
  }

  @OutboxHandler('poison')
  async poison(m: OutboxMessage) {
    this.b.calls.push({ handler: 'poison', message: m });
    throw new OutboxNonRetryableError('payload can never be processed');
  }

  @OutboxHandler('odd.rejection')
  async odd(m: OutboxMessage) {
    this.b.calls.push({ handler: 'odd', message: m });
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
  async plain(m: OutboxMessage) {
    this.b.calls.push({ handler: 'plain', message: m });
  }

  @OutboxHandler('takes.450ms')
  async takes450(m: OutboxMessage) {
    this.b.calls.push({ handler: 'takes450', message: m });
    // Simulated work, not a wait for an event: long enough to use up most of a 1 s lease.
    await new Promise((resolve) => setTimeout(resolve, 450));
  }
}

describe.each(backends())('worker on %s', (backend) => {
  let app: TestApp;
  let b: Behaviour;
  let store: OutboxStore;

  async function start(extra: Parameters<typeof createTestApp>[0]['outbox'] = {}, withSchedule = false) {
    app = await createTestApp({
      backend,
      providers: [Behaviour, Handlers],
      withSchedule,
      outbox: { retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 }, ...extra },
    });
    b = app.module.get(Behaviour);
    store = app.module.get(OUTBOX_STORE);
  }
  afterEach(() => app?.dispose());

  const publish = (topic: string, payload: unknown = {}) =>
    app.txHost.withTransaction(() => app.outbox.publish(topic, payload));
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
    expect(app.logger.matching(new RegExp(`Dead-lettered outbox event ${id} \\(always.fails\\) after attempt 3`))).toHaveLength(1);
    expect(app.logger.matching(/attempt [12] of 3 failed; retrying in \d+ ms or later: Handlers.alwaysFails: Error: boom/)).toHaveLength(2);
  });

  it('waits out the backoff by the database clock', async () => {
    await start({ retry: { maxAttempts: 5, initialDelayMs: 60_000, maxDelayMs: 60_000 } });
    // Pin the jitter draw to the middle of the range: the delay is then exactly 30 s.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.5);
    try {
      const { id } = await publish('always.fails');
      await app.worker.drain();
      const dueIn = {
        postgres: `extract(epoch FROM ("available_at" - now())) * 1000`,
        mariadb: 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "available_at") / 1000',
        sqlite3: `(julianday("available_at") - julianday('now')) * 86400000`,
        'better-sqlite3': `(julianday("available_at") - julianday('now')) * 86400000`,
      }[backend];
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

  it('times a handler out, aborts its signal and records the failure', async () => {
    await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('slow');
    await app.worker.drain();
    expect(b.seenSignal?.aborted).toBe(true);
    expect((await row(id)).last_error).toMatch(/did not finish within its timeout of 50 ms/);
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
    for (const { id } of fresh) expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, last_error: null });
    expect(app.logger.matching(/: attempt 1 did not finish before its lease expired; running attempt 2 alone$/)).toHaveLength(3);
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
    await start({ worker: { leaseMs: 1000, concurrency: 1, batchSize: 3 } });
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

  it.each([
    ['with ScheduleModule imported by the app', true],
    ['without ScheduleModule', false],
  ])('polls on its own schedule %s', async (_name, withSchedule) => {
    await start({ worker: { enabled: true, pollIntervalMs: 20 } }, withSchedule);
    if (withSchedule) {
      expect(app.module.get(SchedulerRegistry).getIntervals()).toContain(`outbox-worker:${app.table}`);
    }
    const { id } = await publish('plain');
    await eventually(() => b.calls.some((c) => c.message.id === id), 10_000, 'scheduled delivery');
    await eventually(async () => (await row(id)).status === 'delivered', 10_000, 'acknowledgement');
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
