import { Injectable } from '@nestjs/common';
import {
  InMemoryTransport,
  OutboxHandler,
  OutboxOperations,
  type OutboxLifecycleEvent,
  OutboxEvents,
  type OutboxMessage,
} from '../../../lib';
import { backends } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

/** The scheduled worker, woken by this app's own commits; its interval never fires within a test. */
const SCHEDULED = { enabled: true, pollIntervalMs: 3_600_000, concurrency: 10 };

/**
 * A target's bound decides from how long its calls take, by the clock of `performance.now()`: the tests
 * move that clock (only it) to say "the slow handler's call has run this long".
 */
function fakeCallClock(): void {
  jest.useFakeTimers({
    doNotFake: [
      'Date',
      'hrtime',
      'nextTick',
      'queueMicrotask',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
}

@Injectable()
class Calls {
  slow: string[] = [];
  fast: string[] = [];
  other: string[] = [];
  alone: string[] = [];
  running = 0;
  maxRunning = 0;
  /** Set by the test: the slow handler's calls end once it resolves. */
  gate = deferred();
  /** Run as each slow call starts. */
  onSlow: () => void = () => undefined;
}

@Injectable()
class Orders {
  constructor(private readonly calls: Calls) {}

  @OutboxHandler('order.placed', { concurrency: 2 })
  slow(message: OutboxMessage) {
    this.calls.slow.push(message.id);
    return this.held();
  }

  /** The only target of its topic (no route matches it). */
  @OutboxHandler('ledger.entry', { concurrency: 2 })
  alone(message: OutboxMessage) {
    this.calls.alone.push(message.id);
    return this.held();
  }

  private async held() {
    const { calls } = this;
    calls.maxRunning = Math.max(calls.maxRunning, ++calls.running);
    calls.onSlow();
    try {
      await calls.gate.promise;
    } finally {
      calls.running--;
    }
  }

  @OutboxHandler('order.placed')
  fast(message: OutboxMessage) {
    this.calls.fast.push(message.id);
  }

  @OutboxHandler('order.shipped')
  other(message: OutboxMessage) {
    this.calls.other.push(message.id);
  }
}

describe.each(backends())('per-target bounds on %s', (backend) => {
  let app: TestApp;
  let memory: InMemoryTransport;
  afterEach(async () => {
    jest.useRealTimers();
    app.module.get(Calls).gate.resolve();
    await app?.dispose();
  });

  async function start(worker: object = {}) {
    memory = new InMemoryTransport('memory');
    app = await createTestApp({
      backend,
      providers: [Calls, Orders],
      outbox: {
        worker,
        transports: [memory],
        routes: [{ topic: 'order.#', transport: 'memory', concurrency: 3 }],
      },
    });
    return app.module.get(Calls);
  }
  const publish = (topic: string, count: number) =>
    app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: count }, (_, n) => ({ topic, payload: { n } }))),
    );

  it("never runs a handler over its bound, and delivers its events' other targets meanwhile", async () => {
    fakeCallClock();
    const calls = await start(SCHEDULED);
    const events: OutboxLifecycleEvent[] = [];
    const subscription = app.module.get(OutboxEvents).events$.subscribe((e) => events.push(e));
    const first = await publish('order.placed', 2);
    await eventually(() => calls.running === 2, 10_000, 'the slow handler running twice');
    // Its calls have run 100 ms, so far: a slot is a long way off, for a lane to wait.
    jest.advanceTimersByTime(100);
    const later = await publish('order.placed', 4);
    const shipped = await publish('order.shipped', 3);
    const all = [...first, ...later, ...shipped].map((e) => e.id);
    await eventually(
      () => calls.fast.length === 6 && calls.other.length === 3 && memory.messages().length === 9,
      10_000,
      'every other target delivered',
    );
    expect(calls.running).toBe(2);
    expect(calls.slow).toEqual(first.map((e) => e.id));
    // The shares of the full handler wait in the table, not on a lane: attempts uncounted, the rest done.
    const operations = app.module.get(OutboxOperations);
    for (const { id } of later) {
      const view = await eventually(async () => {
        const event = await operations.get(id);
        return event?.state === 'scheduled' && event.succeededEarlier.length === 2 ? event : undefined;
      });
      expect(view).toMatchObject({ status: 'pending', attempts: 0 });
      expect([...view.succeededEarlier].sort()).toEqual(['Orders.fast', 'transport:memory']);
    }
    // Their acknowledgement is written as their claim ends, after the deferrals of its other events.
    for (const { id } of shipped) {
      const view = await eventually(async () => {
        const event = await operations.get(id);
        return event?.status === 'delivered' ? event : undefined;
      });
      expect(view).toMatchObject({ status: 'delivered', attempts: 1 });
    }
    const deferrals = events.filter((e) => e.type === 'deferred');
    expect(new Set(deferrals.map((e) => e.id))).toEqual(new Set(later.map((e) => e.id)));
    for (const e of deferrals) expect(e).toMatchObject({ topic: 'order.placed', targets: ['Orders.slow'] });
    subscription.unsubscribe();

    // Room again: as they fall due, each is delivered to the slow handler alone.
    calls.gate.resolve();
    await eventually(
      async () => (await outboxRows(app)).every((row) => row.status === 'delivered'),
      10_000,
      'every event delivered',
    );
    expect([...calls.slow].sort()).toEqual([...first, ...later].map((e) => e.id).sort());
    expect([...calls.fast].sort()).toEqual([...first, ...later].map((e) => e.id).sort());
    expect(
      memory
        .messages()
        .map((m) => m.id)
        .sort(),
    ).toEqual([...all].sort());
    expect(calls.maxRunning).toBe(2);
  });

  it('drain() delivers the shares it put off, once the handler has room', async () => {
    fakeCallClock();
    // Only the slow handler is ever full here.
    const calls = await start({ targetConcurrency: 10 });
    const placed = await publish('order.placed', 4);
    // The first call has run "30 ms" by the bound's clock as the others find its slots taken (both are,
    // after the second event), and it waits until every fast target is delivered.
    calls.onSlow = () => {
      calls.onSlow = () => undefined;
      jest.advanceTimersByTime(30);
    };
    const draining = app.worker.drain();
    await eventually(() => calls.fast.length === 4, 10_000, 'the fast targets delivered');
    calls.gate.resolve();
    const result = await draining;
    expect(result).toMatchObject({ delivered: 4, failed: 0, deadLettered: 0 });
    // Two events put off, each once or, taken again while the slots were still held, more.
    expect(result.deferred).toBeGreaterThanOrEqual(2);
    expect([...calls.slow].sort()).toEqual(placed.map((e) => e.id).sort());
    expect(calls.maxRunning).toBe(2);
    expect(memory.messages()).toHaveLength(4);
  });
  it('keeps a share on its lane, not the table, while no other target has work', async () => {
    fakeCallClock();
    const calls = await start({ targetConcurrency: 10 });
    const events: OutboxLifecycleEvent[] = [];
    const subscription = app.module.get(OutboxEvents).events$.subscribe((e) => events.push(e));
    const entries = await publish('ledger.entry', 6);
    // The first call has run "30 ms" by the bound's clock as the third event finds both slots taken:
    // long calls, but a share written back would only come back to this handler, the worker's only work.
    calls.onSlow = () => {
      calls.onSlow = () => undefined;
      jest.advanceTimersByTime(30);
    };
    const draining = app.worker.drain();
    await eventually(() => calls.running === 2, 10_000, 'both slots taken');
    calls.gate.resolve();
    const result = await draining;
    subscription.unsubscribe();
    expect(result).toMatchObject({ delivered: 6, deferred: 0, failed: 0 });
    expect(events.filter((e) => e.type === 'deferred')).toEqual([]);
    expect([...calls.alone].sort()).toEqual(entries.map((e) => e.id).sort());
    expect(calls.maxRunning).toBe(2);
    // Each delivered on its first attempt, never put back in between.
    const rows = await outboxRows(app);
    expect(rows.map((r) => [r.status, Number(r.attempts)])).toEqual(entries.map(() => ['delivered', 1]));
  });
});
