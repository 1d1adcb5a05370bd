import { Injectable } from '@nestjs/common';
import { OutboxHandler, OutboxNonRetryableError, OutboxOperations, type OutboxMessage } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { drainAll as drainUntilSettled, txOf, type Step } from './ordered-fixtures';

/** What a handler call saw: its event, and the status of its key's previous event in the table as it started. */
interface Start {
  tx: string;
  before: string | null;
}

@Injectable()
class Sink {
  /** Per key, each handler call in call order. */
  starts = new Map<string, Start[]>();
  /** Per key, the events whose handler returned, in order. */
  done = new Map<string, string[]>();
  inFlight = 0;
  mostInFlight = 0;
  doomed = new Set<string>();
  failOnce = new Set<string>();
  /** Reads the status of the event published before `m` in its key (null for the first). */
  statusBefore: ((m: OutboxMessage<Step>) => Promise<string | null>) | undefined;

  private async record(m: OutboxMessage<Step>) {
    const key = m.key!;
    this.mostInFlight = Math.max(this.mostInFlight, ++this.inFlight);
    try {
      const before = (await this.statusBefore?.(m)) ?? null;
      this.starts.set(key, [...(this.starts.get(key) ?? []), { tx: m.payload.tx, before }]);
      if (this.doomed.has(m.payload.tx)) throw new OutboxNonRetryableError(`doomed ${m.payload.tx}`);
      if (this.failOnce.delete(m.payload.tx)) throw new Error(`failing once: ${m.payload.tx}`);
      this.done.set(key, [...(this.done.get(key) ?? []), m.payload.tx]);
    } finally {
      this.inFlight--;
    }
  }

  @OutboxHandler('order.changed')
  order(m: OutboxMessage<Step>) {
    return this.record(m);
  }

  @OutboxHandler('stock.changed')
  stock(m: OutboxMessage<Step>) {
    return this.record(m);
  }

  @OutboxHandler('strict.changed')
  strict(m: OutboxMessage<Step>) {
    return this.record(m);
  }
}

describe.each(backends())('per-key order acknowledged by run on %s', (backend) => {
  let app: TestApp;
  let sink: Sink;

  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [Sink],
      outbox: {
        ordering: [
          { topic: 'order.*', acknowledge: 'run' },
          { topic: 'stock.*', acknowledge: 'run', deadHead: 'skip' },
          { topic: 'strict.*' },
        ],
        retry: { maxAttempts: 2, initialDelayMs: 0, maxDelayMs: 0 },
      },
    });
  });
  afterAll(() => app.dispose());
  beforeEach(() => {
    sink = app.module.get(Sink);
    sink.starts.clear();
    sink.done.clear();
    sink.mostInFlight = 0;
    sink.doomed.clear();
    sink.failOnce.clear();
    sink.statusBefore = undefined;
  });

  const publishKey = (topic: string, key: string, txs: string[]) =>
    app.txHost.withTransaction(() => app.outbox.publishMany(txs.map((tx) => ({ topic, payload: { tx }, key }))));
  const drainAll = () => drainUntilSettled(app);
  const rowsOf = async (key: string) =>
    (await outboxRows(app))
      .filter((r) => r.key === key)
      .sort((a, b) => Number(a.seq) - Number(b.seq))
      .map((r) => ({ id: String(r.id), tx: txOf(r), status: String(r.status), attempts: Number(r.attempts) }));
  /** The handler's view of the table: the status of the event of its key one place before it. */
  const watchStatusBefore = () => {
    sink.statusBefore = async (m) => {
      const [row] = await app.raw.query<{ status: string }>(
        app.sql(
          `SELECT o."status" FROM "${app.table}" o JOIN "${app.table}" m ON m."id" = ? ` +
            `WHERE o."key" = m."key" AND o."seq" = m."seq" - 1`,
        ),
        [m.id],
      );
      return row?.status ?? null;
    };
  };

  it('delivers a key’s run one at a time, in order, each started before the one ahead is acknowledged; all acknowledged at the end', async () => {
    const key = `run-${Date.now()}`;
    const txs = Array.from({ length: 20 }, (_, i) => `r${i + 1}`);
    await publishKey('order.changed', key, txs);
    watchStatusBefore();
    const acknowledge = jest.spyOn(app.store, 'acknowledge');
    try {
      await drainAll();
    } finally {
      acknowledge.mockRestore();
    }
    const starts = sink.starts.get(key)!;
    expect(starts.map((s) => s.tx)).toEqual(txs);
    expect(sink.mostInFlight).toBe(1);
    // The run's events started while the event ahead of them was not yet written delivered: one
    // acknowledgement (or a few, at the buffer's 250 ms) for the run, not one per event.
    const unacknowledgedAhead = starts.slice(1).filter((s) => s.before !== 'delivered').length;
    expect(unacknowledgedAhead).toBeGreaterThan(txs.length / 2);
    expect(acknowledge.mock.calls.length).toBeLessThan(txs.length / 2);
    expect((await rowsOf(key)).map((r) => [r.tx, r.status, r.attempts])).toEqual(txs.map((tx) => [tx, 'delivered', 1]));
  });

  it('keeps the default for the topics that do not ask: each event acknowledged before its key’s next starts', async () => {
    const key = `strict-${Date.now()}`;
    const txs = Array.from({ length: 8 }, (_, i) => `s${i + 1}`);
    await publishKey('strict.changed', key, txs);
    watchStatusBefore();
    await drainAll();
    expect(sink.starts.get(key)).toEqual(txs.map((tx, i) => ({ tx, before: i === 0 ? null : 'delivered' })));
  });

  it('stops a run at a failure: the events ahead acknowledged, the failed one retried as its key’s front, then the rest', async () => {
    const key = `fail-${Date.now()}`;
    const txs = Array.from({ length: 10 }, (_, i) => `f${i + 1}`);
    await publishKey('order.changed', key, txs);
    sink.failOnce.add('f5');
    await drainAll();
    expect(sink.starts.get(key)!.map((s) => s.tx)).toEqual([...txs.slice(0, 5), ...txs.slice(4)]);
    expect(sink.done.get(key)).toEqual(txs);
    const rows = await rowsOf(key);
    expect(rows.map((r) => [r.tx, r.status, r.attempts])).toEqual(
      txs.map((tx) => [tx, 'delivered', tx === 'f5' ? 2 : 1]),
    );
  });

  it('stops a run at a dead event: its key blocked behind it (block), or going on past it (skip)', async () => {
    const [blocked, skipped] = ['dead-block', 'dead-skip'].map((k) => `${k}-${Date.now()}`);
    await publishKey('order.changed', blocked, ['b1', 'b2', 'b3', 'b4']);
    await publishKey('stock.changed', skipped, ['s1', 's2', 's3', 's4']);
    sink.doomed.add('b2').add('s2');
    await drainAll();
    expect(sink.done.get(blocked)).toEqual(['b1']);
    expect((await rowsOf(blocked)).map((r) => [r.tx, r.status])).toEqual([
      ['b1', 'delivered'],
      ['b2', 'dead'],
      ['b3', 'waiting'],
      ['b4', 'waiting'],
    ]);
    expect((await app.module.get(OutboxOperations).blockedKeys()).map((k) => k.key)).toContain(blocked);
    expect(sink.done.get(skipped)).toEqual(['s1', 's3', 's4']);
    expect((await outboxRows(app)).filter((r) => r.key === blocked && r.claim_token !== null)).toEqual([]);
  });

  it('after a worker dies mid-run, delivers the key again from its first unacknowledged event, in order, never an acknowledged one', async () => {
    const key = `crash-${Date.now()}`;
    const txs = Array.from({ length: 8 }, (_, i) => `c${i + 1}`);
    await publishKey('order.changed', key, txs);
    // A worker claims the key's run, delivers c1–c5 and dies having written the acknowledgement of c1–c3 only.
    const died = await app.store.claim({ batchSize: 20, leaseMs: 200, maxAttempts: 5, lanes: 10 });
    const front = died.events.find((e) => e.key === key)!;
    const run = [front, ...(died.runs.get(front.id) ?? [])];
    expect(run.map((e) => (e.payload as Step).tx)).toEqual(txs);
    expect(
      await app.store.acknowledge(
        run.slice(0, 3).map((e) => e.id),
        died.token,
        [key],
      ),
    ).toBe(3);
    const others = died.events.filter((e) => e.key !== key);
    const theirs = others.flatMap((e) => [e.id, ...(died.runs.get(e.id) ?? []).map((r) => r.id)]);
    if (theirs.length > 0) await app.store.releaseMany(theirs, died.token, true);
    await eventually(
      async () => (await app.outbox.counts()).inFlight === 0,
      10_000,
      'the dead worker’s lease to run out',
    );
    await drainAll();
    expect(sink.starts.get(key)!.map((s) => s.tx)).toEqual(txs.slice(3));
    expect((await rowsOf(key)).map((r) => r.status)).toEqual(txs.map(() => 'delivered'));
  });
});
