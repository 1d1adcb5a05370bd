import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import {
  OutboxEvents,
  OutboxHandler,
  OutboxNonRetryableError,
  OutboxOperations,
  type OutboxLifecycleEvent,
  type OutboxMessage,
} from '../../../lib';
import type { ClaimResult } from '../../../lib/store/claim-result';
import { backends, isSqlite, type BackendName } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { drainAll as drainUntilSettled, txOf, type Step } from './ordered-fixtures';

@Injectable()
class Sink {
  /** The payloads' `tx` each handler call was given, in call order, per key. */
  seen = new Map<string, string[]>();
  inFlight = new Map<string, number>();
  /** The most events of one key that were ever in a handler at once. */
  mostInFlight = 0;
  /** Transactions whose event fails (non-retryable) until healed. */
  doomed = new Set<string>();
  /** Transactions whose event fails once (retryable). */
  failOnce = new Set<string>();
  /** Called as each handler call starts. */
  starting: ((m: OutboxMessage<Step>) => Promise<void>) | undefined;

  private async record(m: OutboxMessage<Step>) {
    const key = m.key!;
    const now = (this.inFlight.get(key) ?? 0) + 1;
    this.inFlight.set(key, now);
    this.mostInFlight = Math.max(this.mostInFlight, now);
    try {
      await this.starting?.(m);
      // Gives another lane the chance to start an event of the same key, were it claimable.
      await new Promise((resolve) => setImmediate(resolve));
      if (this.doomed.has(m.payload.tx)) throw new OutboxNonRetryableError(`doomed ${m.payload.tx}`);
      if (this.failOnce.delete(m.payload.tx)) throw new Error(`failing once: ${m.payload.tx}`);
      this.seen.set(key, [...(this.seen.get(key) ?? []), m.payload.tx]);
    } finally {
      this.inFlight.set(key, this.inFlight.get(key)! - 1);
    }
  }

  @OutboxHandler('order.changed')
  changed(m: OutboxMessage<Step>) {
    return this.record(m);
  }

  @OutboxHandler('stock.changed')
  stock(m: OutboxMessage<Step>) {
    return this.record(m);
  }

  @OutboxHandler('audit.logged')
  audit(m: OutboxMessage<Step>) {
    return this.record(m);
  }
}

/** What the lifecycle stream said about keys. */
@Injectable()
class KeyEvents {
  readonly seen: OutboxLifecycleEvent[] = [];
  constructor(events: OutboxEvents) {
    events.events$.subscribe((event) => {
      if (event.type === 'key.blocked' || event.type === 'key.unblocked') this.seen.push(event);
    });
  }
}

const HOUR_MS = 3_600_000;

/** Two hours before the database's now, as each backend stores times. */
const TWO_HOURS_AGO: Record<BackendName, string> = {
  postgres: "now() - interval '2 hours'",
  mariadb: 'UTC_TIMESTAMP(6) - INTERVAL 2 HOUR',
  sqlite3: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours')",
  'better-sqlite3': "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours')",
};

/** Whether a statement on `table` waits for a row lock another transaction holds. */
async function waitsForLock(app: TestApp, table: string): Promise<boolean> {
  const [row] =
    app.backend === 'postgres'
      ? await app.raw.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`,
          [table],
        )
      : await app.raw.query<{ n: string }>(
          "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%')",
          [table],
        );
  return Number(row.n) > 0;
}

const ORDERING = [
  { topic: 'order.*', deadHead: 'block' as const },
  { topic: 'stock.*', deadHead: 'skip' as const },
];

describe.each(backends())('per-key order on %s', (backend) => {
  let app: TestApp;
  let sink: Sink;

  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [Sink, KeyEvents],
      outbox: {
        ordering: ORDERING,
        retry: { maxAttempts: 2, initialDelayMs: 0, maxDelayMs: 0 },
        retention: { deadMs: HOUR_MS },
      },
    });
    await app.raw.query(`CREATE TABLE "${app.table}_counter" ("key" varchar(64) PRIMARY KEY, "n" integer NOT NULL)`);
    await app.raw.query(`CREATE TABLE "${app.table}_tx" ("tx" varchar(64) PRIMARY KEY, "n" integer NOT NULL)`);
  });
  afterAll(async () => {
    if (!isSqlite(backend)) await app.raw.query(`DROP TABLE "${app.table}_counter", "${app.table}_tx"`);
    await app.dispose();
  });
  beforeEach(() => {
    sink = app.module.get(Sink);
    sink.seen.clear();
    sink.mostInFlight = 0;
    sink.doomed.clear();
    sink.failOnce.clear();
    sink.starting = undefined;
  });

  const publish = (topic: string, key: string | null, tx: string, options: { delayMs?: number } = {}) =>
    app.outbox.publish(topic, { tx }, { key: key ?? undefined, ...options });
  const inTx = <T>(work: () => Promise<T>) => app.txHost.withTransaction(work);
  const drainAll = () => drainUntilSettled(app);
  const rowsOf = async (key: string) =>
    (await outboxRows(app))
      .filter((r) => r.key === key)
      .sort((a, b) => Number(a.seq) - Number(b.seq))
      .map((r) => ({ tx: txOf(r), status: r.status }));

  it('numbers a key’s events and makes only the first claimable; other topics and keyless events stay as they were', async () => {
    const key = `k-${Date.now()}`;
    const mark = (tx: string) => `${key}/${tx}`;
    await inTx(async () => {
      await app.outbox.publishMany([
        { topic: 'order.changed', payload: { tx: mark('a') }, key },
        { topic: 'audit.logged', payload: { tx: mark('x') }, key },
        { topic: 'order.changed', payload: { tx: mark('b') }, key },
        { topic: 'order.changed', payload: { tx: mark('n') } },
      ]);
    });
    await inTx(() => publish('order.changed', key, mark('c')));
    const byTx = new Map((await outboxRows(app)).map((r) => [txOf(r), r]));
    const row = (tx: string) => byTx.get(mark(tx))!;
    expect(['a', 'b', 'c'].map((tx) => [row(tx).status, Number(row(tx).seq)])).toEqual([
      ['pending', 1],
      ['waiting', 2],
      ['waiting', 3],
    ]);
    expect(row('x')).toMatchObject({ status: 'pending', seq: null });
    expect(row('n')).toMatchObject({ status: 'pending', seq: null });
    const keyRow = async () =>
      (
        await app.raw.query(app.sql(`SELECT "last_seq", "front_id" FROM "${app.table}_keys" WHERE "key" = ?`), [key])
      )[0];
    expect(await keyRow()).toMatchObject({ front_id: row('a').id });
    expect(Number((await keyRow()).last_seq)).toBe(3);

    await drainAll();
    // The audit event is of an unordered topic: delivered whenever, beside the key's ordered ones.
    expect(sink.seen.get(key)!.filter((tx) => tx !== mark('x'))).toEqual(['a', 'b', 'c'].map(mark));
    expect(await keyRow()).toMatchObject({ front_id: null });

    // The key's row stays, with no front: the next event is its front at once, numbered on.
    await inTx(() => publish('order.changed', key, mark('d')));
    const d = (await outboxRows(app)).find((r) => txOf(r) === mark('d'))!;
    expect([d.status, Number(d.seq)]).toEqual(['pending', 4]);
    expect(await keyRow()).toMatchObject({ front_id: d.id });
    expect(Number((await keyRow()).last_seq)).toBe(4);
    await drainAll();
  });

  it('numbers interleaved keys of one publishMany in publish order, in one insert or in several', async () => {
    // 9,000 events: more than one insert takes (its bound parameters), so the rows go in several.
    for (const count of [4, 9_000]) {
      const keys = [`i-a-${count}-${Date.now()}`, `i-b-${count}-${Date.now()}`];
      const items = Array.from({ length: count }, (_, n) => ({
        topic: 'order.changed',
        payload: { tx: `${keys[n % 2]}/${n}` },
        key: keys[n % 2],
      }));
      await inTx(() => app.outbox.publishMany(items));
      const rows = await outboxRows(app);
      for (const [k, key] of keys.entries()) {
        const mine = rows.filter((r) => r.key === key).sort((a, b) => Number(a.seq) - Number(b.seq));
        const published = items.flatMap((item, n) => (n % 2 === k ? [item.payload.tx] : []));
        expect(mine.map(txOf)).toEqual(published);
        expect(mine.map((r) => Number(r.seq))).toEqual(published.map((_, n) => n + 1));
        expect(mine.map((r) => r.status)).toEqual(published.map((_, n) => (n === 0 ? 'pending' : 'waiting')));
        const [keyRow] = await app.raw.query<{ last_seq: unknown; front_id: string }>(
          app.sql(`SELECT "last_seq", "front_id" FROM "${app.table}_keys" WHERE "key" = ?`),
          [key],
        );
        expect({ last: Number(keyRow.last_seq), front: keyRow.front_id }).toEqual({
          last: count / 2,
          front: mine[0].id,
        });
      }
      await app.raw.query(app.sql(`DELETE FROM "${app.table}" WHERE "key" IN (?, ?)`), keys);
      await app.raw.query(app.sql(`DELETE FROM "${app.table}_keys" WHERE "key" IN (?, ?)`), keys);
    }
  });

  it('delivers each key’s events in the order their transactions committed, one at a time, with no gap', async () => {
    const keys = ['c-1', 'c-2', 'c-3'].map((k) => `${k}-${Date.now()}`);
    for (const key of keys) {
      await app.raw.query(app.sql(`INSERT INTO "${app.table}_counter" ("key", "n") VALUES (?, 0)`), [key]);
    }
    const perKey = 12;
    // Each transaction publishes first, waits a random while, then bumps its key's counter and records
    // the value: the order of the counter values is the commit order of each key's transactions.
    const transaction = async (key: string, i: number) => {
      const tx = `${key}/${i}`;
      await inTx(async () => {
        await publish('order.changed', key, tx);
        await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 15)));
        const manager = app.txHost.tx;
        await manager.query(app.sql(`UPDATE "${app.table}_counter" SET "n" = "n" + 1 WHERE "key" = ?`), [key]);
        const counted = `SELECT "n" FROM "${app.table}_counter" WHERE "key" = ?`;
        const [{ n }] = await manager.query<Array<{ n: unknown }>>(app.sql(counted), [key]);
        await manager.query(app.sql(`INSERT INTO "${app.table}_tx" ("tx", "n") VALUES (?, ?)`), [tx, Number(n)]);
      });
    };
    await Promise.all(keys.flatMap((key) => Array.from({ length: perKey }, (_, i) => transaction(key, i))));
    // Delivered once all have committed: unordered, the claim would take them in publish order.
    await drainAll();

    const recorded = await app.raw.query<{ tx: string; n: unknown }>(`SELECT "tx", "n" FROM "${app.table}_tx"`);
    const counters = new Map(recorded.map((r) => [r.tx, Number(r.n)]));
    for (const key of keys) {
      expect(sink.seen.get(key)!.map((tx) => counters.get(tx))).toEqual(
        Array.from({ length: perKey }, (_, i) => i + 1),
      );
    }
    expect(sink.mostInFlight).toBe(1);
  });

  it('blocks a key behind its dead head (block); other keys go on', async () => {
    const [a, b] = ['blocked', 'free'].map((k) => `${k}-${Date.now()}`);
    sink.doomed.add('a1');
    for (const [key, tx] of [
      [a, 'a1'],
      [a, 'a2'],
      [b, 'b1'],
      [a, 'a3'],
      [b, 'b2'],
    ]) {
      await inTx(() => publish('order.changed', key, tx));
    }
    await drainAll();
    expect(sink.seen.get(b)).toEqual(['b1', 'b2']);
    expect(sink.seen.get(a)).toBeUndefined();
    expect(await rowsOf(a)).toEqual([
      { tx: 'a1', status: 'dead' },
      { tx: 'a2', status: 'waiting' },
      { tx: 'a3', status: 'waiting' },
    ]);
    // Waiting behind the dead head: not due, so no alert on `due` fires for them.
    expect(await app.outbox.counts()).toMatchObject({ due: 0, scheduled: 2, pending: 2 });
    const head = (await outboxRows(app)).find((r) => r.key === a && r.status === 'dead')!;
    const ops = app.module.get(OutboxOperations);
    expect(await ops.blockedKeys()).toEqual([
      {
        key: a,
        headId: head.id,
        topic: 'order.changed',
        state: 'dead',
        attempts: 1,
        error: expect.stringContaining('doomed a1') as string,
        since: expect.any(Date) as Date,
        waiting: 2,
      },
    ]);
    const waiting = await ops.find({ status: 'waiting', key: a }, { order: 'oldest' });
    expect(waiting.items.map((e) => [e.state, e.payload])).toEqual([
      ['waiting', { tx: 'a2' }],
      ['waiting', { tx: 'a3' }],
    ]);
    // Waiting is not scheduled: deliverNow leaves it to its key's order.
    expect(await ops.deliverNow({ ids: [waiting.items[0].id] })).toMatchObject({
      changed: 0,
      skipped: [{ id: waiting.items[0].id, reason: 'waiting' }],
    });
    const stats = await ops.stats();
    expect(stats).toMatchObject({ blockedKeys: 1, due: 0 });
    expect(stats.byTopic.find((t) => t.topic === 'order.changed')).toMatchObject({ scheduled: 2, dead: 1 });
    expect(app.module.get(KeyEvents).seen.filter((e) => 'key' in e && e.key === a)).toEqual([
      expect.objectContaining({ type: 'key.blocked', key: a, id: head.id, topic: 'order.changed' }),
    ]);
    expect(app.logger.matching(new RegExp(`key "${a}" blocked behind its dead head ${String(head.id)}`))).toHaveLength(
      1,
    );
  });

  it('unblocks a key when its dead head is redriven (delivered first) or discarded (the next goes on)', async () => {
    const [a, b] = ['redriven', 'discarded'].map((k) => `${k}-${Date.now()}`);
    sink.doomed.add('a1').add('b1');
    for (const [key, tx] of [
      [a, 'a1'],
      [a, 'a2'],
      [b, 'b1'],
      [b, 'b2'],
    ]) {
      await inTx(() => publish('order.changed', key, tx));
    }
    await drainAll();
    const deadOf = async (key: string) => (await outboxRows(app)).find((r) => r.key === key && r.status === 'dead')!;
    const ops = app.module.get(OutboxOperations);
    sink.doomed.clear();
    expect(await ops.redrive({ ids: [String((await deadOf(a)).id)] })).toMatchObject({ changed: 1 });
    expect(await ops.discard({ ids: [String((await deadOf(b)).id)] })).toMatchObject({ changed: 1 });
    const unblocked = app.module.get(KeyEvents).seen.filter((e) => e.type === 'key.unblocked');
    expect(unblocked).toEqual([
      expect.objectContaining({ key: a, how: 'redrive' }),
      expect.objectContaining({ key: b, how: 'discard' }),
    ]);
    expect((await ops.blockedKeys()).filter((k) => k.key === a || k.key === b)).toEqual([]);
    await drainAll();
    expect(sink.seen.get(a)).toEqual(['a1', 'a2']);
    expect(sink.seen.get(b)).toEqual(['b2']);
  });

  it('redrives an event a dead head let pass (skip) to the back of its key', async () => {
    const key = `back-${Date.now()}`;
    sink.doomed.add('s1');
    await inTx(() => publish('stock.changed', key, 's1'));
    await inTx(() => publish('stock.changed', key, 's2'));
    await drainAll();
    expect(sink.seen.get(key)).toEqual(['s2']);
    sink.doomed.clear();
    // s3 is published before the redrive, s4 after it.
    await inTx(() => publish('stock.changed', key, 's3'));
    const dead = (await outboxRows(app)).find((r) => r.key === key && r.status === 'dead')!;
    expect(await app.module.get(OutboxOperations).redrive({ ids: [String(dead.id)] })).toMatchObject({ changed: 1 });
    await inTx(() => publish('stock.changed', key, 's4'));
    await drainAll();
    expect(sink.seen.get(key)).toEqual(['s2', 's3', 's1', 's4']);
    expect(sink.mostInFlight).toBe(1);
  });

  it('lets the next event of a key go on past a dead head (skip)', async () => {
    const key = `skip-${Date.now()}`;
    sink.doomed.add('s1');
    await inTx(async () => {
      await publish('stock.changed', key, 's1');
      await publish('stock.changed', key, 's2');
    });
    await inTx(() => publish('stock.changed', key, 's3'));
    await drainAll();
    expect(sink.seen.get(key)).toEqual(['s2', 's3']);
    expect(await rowsOf(key)).toEqual([
      { tx: 's1', status: 'dead' },
      { tx: 's2', status: 'delivered' },
      { tx: 's3', status: 'delivered' },
    ]);
  });

  it('keeps a key waiting behind a delayed first event, while other keys go on', async () => {
    const [a, b] = ['later', 'now'].map((k) => `${k}-${Date.now()}`);
    await inTx(async () => {
      await publish('order.changed', a, 'd1', { delayMs: 3_600_000 });
      await publish('order.changed', a, 'd2');
      await publish('order.changed', b, 'e1');
    });
    await drainAll();
    expect(sink.seen.get(a)).toBeUndefined();
    expect(sink.seen.get(b)).toEqual(['e1']);
    expect(await rowsOf(a)).toEqual([
      { tx: 'd1', status: 'pending' },
      { tx: 'd2', status: 'waiting' },
    ]);
  });

  it('deletes the rows of idle keys at retention; a key published again numbers from 1', async () => {
    const key = `idle-${Date.now()}`;
    await inTx(() => publish('order.changed', key, 'i1'));
    await drainAll();
    const keyRows = () => app.raw.query(app.sql(`SELECT "last_seq" FROM "${app.table}_keys" WHERE "key" = ?`), [key]);
    expect(await keyRows()).toHaveLength(1);
    await app.worker.purge();
    expect(await keyRows()).toEqual([]);
    expect(app.logger.matching(/Retention deleted the rows of \d+ idle ordered key\(s\)/).length).toBeGreaterThan(0);
    await inTx(() => publish('order.changed', key, 'i2'));
    await drainAll();
    expect(sink.seen.get(key)).toEqual(['i1', 'i2']);
    expect((await outboxRows(app)).filter((r) => r.key === key).map((r) => [r.status, Number(r.seq)])).toEqual([
      ['delivered', 1],
      ['delivered', 1],
    ]);
  });

  it('claims the events behind a key’s first one with it (a run), delivered in order on one lane; a retried one keeps its place', async () => {
    const key = `run-${Date.now()}`;
    const txs = Array.from({ length: 12 }, (_, i) => `r${i + 1}`);
    await inTx(() => app.outbox.publishMany(txs.map((tx) => ({ topic: 'order.changed', payload: { tx }, key }))));
    sink.failOnce.add('r5');
    const claims: number[] = [];
    const subscription = app.module
      .get(OutboxEvents)
      .ofType('claimed')
      .subscribe((e) => claims.push(e.count));
    try {
      await drainAll();
    } finally {
      subscription.unsubscribe();
    }
    expect(sink.seen.get(key)).toEqual(txs);
    expect(sink.mostInFlight).toBe(1);
    // One claim took the first event and the 11 behind it; r5 failed, the 7 after it went back, and the
    // next claim took r5 (its key's front by then, due again at once) with those 7.
    expect(claims.slice(0, 2)).toEqual([12, 8]);
    const attempts = (await outboxRows(app)).filter((r) => r.key === key).map((r) => [txOf(r), Number(r.attempts)]);
    expect(attempts.filter(([, n]) => n !== 1)).toEqual([['r5', 2]]);
  });

  it('takes runs only for lanes a claim’s fronts leave idle: with as many keys as lanes, fronts alone', async () => {
    const keys = [1, 2, 3, 4].map((n) => `lanes-${n}-${Date.now()}`);
    await inTx(() =>
      app.outbox.publishMany(
        keys.flatMap((key) => [1, 2, 3].map((n) => ({ topic: 'order.changed', payload: { tx: `l${n}` }, key }))),
      ),
    );
    const args = { batchSize: 50, leaseMs: 60_000, maxAttempts: 5 };
    const busy = await app.store.claim({ ...args, lanes: 4 });
    expect(busy.events.map((e) => e.key).sort()).toEqual([...keys].sort());
    expect(busy.runs.size).toBe(0);
    expect(
      await app.store.releaseMany(
        busy.events.map((e) => e.id),
        busy.token,
        true,
      ),
    ).toBe(4);

    const spare = await app.store.claim({ ...args, lanes: 5 });
    expect(spare.events).toHaveLength(4);
    const runs = spare.events.map((e) => (spare.runs.get(e.id) ?? []).map((r) => [r.key, (r.payload as Step).tx]));
    expect(runs).toEqual(
      spare.events.map((e) => [
        [e.key, 'l2'],
        [e.key, 'l3'],
      ]),
    );
    const held = [...spare.events, ...[...spare.runs.values()].flat()].map((e) => e.id);
    expect(await app.store.releaseMany(held, spare.token, true)).toBe(12);
    await drainAll();
    for (const key of keys) expect(sink.seen.get(key)).toEqual(['l1', 'l2', 'l3']);
  });

  it('wakes no worker as a run moves its key on to the next event the same claim holds', async () => {
    const key = `quiet-${Date.now()}`;
    const txs = Array.from({ length: 12 }, (_, i) => `q${i + 1}`);
    await inTx(() => app.outbox.publishMany(txs.map((tx) => ({ topic: 'order.changed', payload: { tx }, key }))));
    const spy = jest.spyOn(app.store, 'eventsMadeDue');
    let wakeUps: number;
    try {
      await drainAll();
      wakeUps = spy.mock.calls.length;
    } finally {
      spy.mockRestore();
    }
    expect(sink.seen.get(key)).toEqual(txs);
    // Each of the 11 moves made an event the front that this claim had already taken: not due for anyone else.
    expect(wakeUps).toBe(0);
  });

  it('wakes the workers when an acknowledgement makes the next event of its key due, not when that one is delayed', async () => {
    const [due, delayed] = ['next-due', 'next-delayed'].map((k) => `${k}-${Date.now()}`);
    await inTx(async () => {
      await publish('order.changed', due, 'n1');
      await publish('order.changed', due, 'n2');
      await publish('order.changed', delayed, 'l1');
      await publish('order.changed', delayed, 'l2', { delayMs: HOUR_MS });
    });
    // One lane: the claim takes the fronts alone, no run behind them.
    const claim = await app.store.claim({ batchSize: 50, leaseMs: 60_000, maxAttempts: 5, lanes: 1 });
    const front = (key: string) => claim.events.find((e) => e.key === key)!.id;
    const spy = jest.spyOn(app.store, 'eventsMadeDue');
    const wakeUps: number[] = [];
    try {
      for (const key of [due, delayed]) {
        expect(await app.store.acknowledge([front(key)], claim.token, [key])).toBe(1);
        wakeUps.push(spy.mock.calls.length);
      }
    } finally {
      spy.mockRestore();
    }
    expect(wakeUps).toEqual([1, 1]);
    const others = claim.events.filter((e) => e.key !== due && e.key !== delayed).map((e) => e.id);
    await app.store.releaseMany(others, claim.token, true);
    await drainAll();
    expect(sink.seen.get(due)).toEqual(['n2']);
    expect(await rowsOf(delayed)).toEqual([
      { tx: 'l1', status: 'delivered' },
      { tx: 'l2', status: 'pending' },
    ]);
  });

  it('stops a run at a dead event: blocked behind it (block), or going on past it (skip)', async () => {
    const [blocked, skipped] = ['run-block', 'run-skip'].map((k) => `${k}-${Date.now()}`);
    await inTx(async () => {
      for (const n of [1, 2, 3, 4]) await publish('order.changed', blocked, `b${n}`);
      for (const n of [1, 2, 3, 4]) await publish('stock.changed', skipped, `s${n}`);
    });
    sink.doomed.add('b2').add('s2');
    await drainAll();
    expect(sink.seen.get(blocked)).toEqual(['b1']);
    expect(await rowsOf(blocked)).toEqual([
      { tx: 'b1', status: 'delivered' },
      { tx: 'b2', status: 'dead' },
      { tx: 'b3', status: 'waiting' },
      { tx: 'b4', status: 'waiting' },
    ]);
    expect((await app.module.get(OutboxOperations).blockedKeys()).map((k) => k.key)).toContain(blocked);
    expect(sink.seen.get(skipped)).toEqual(['s1', 's3', 's4']);
    // Nothing of the stopped runs is left leased.
    expect((await outboxRows(app)).filter((r) => r.key === blocked && r.claim_token !== null)).toEqual([]);
  });

  it('keeps a dead head that blocks its key through retention by age; a dead event that blocks nothing goes', async () => {
    const [blocked, skipped] = ['ret-block', 'ret-skip'].map((k) => `${k}-${Date.now()}`);
    await inTx(async () => {
      for (const n of [1, 2]) await publish('order.changed', blocked, `rb${n}`);
      for (const n of [1, 2]) await publish('stock.changed', skipped, `rs${n}`);
    });
    sink.doomed.add('rb1').add('rs1');
    await drainAll();
    await app.raw.query(
      app.sql(
        `UPDATE "${app.table}" SET "processed_at" = ${TWO_HOURS_AGO[backend]} WHERE "status" = 'dead' AND "key" IN (?, ?)`,
      ),
      [blocked, skipped],
    );
    const ops = app.module.get(OutboxOperations);
    const purge = async () => {
      if (isSqlite(backend)) return app.worker.purge();
      // Another transaction holding the blocked key's row changes nothing: retention reads it, never locks it.
      const holder = app.dataSource.createQueryRunner();
      await holder.startTransaction();
      try {
        await holder.query(app.sql(`SELECT "key" FROM "${app.table}_keys" WHERE "key" = ? FOR UPDATE`), [blocked]);
        return await app.worker.purge();
      } finally {
        await holder.rollbackTransaction();
        await holder.release();
      }
    };
    expect(await purge()).toMatchObject({ dead: 1 });
    expect(await rowsOf(blocked)).toEqual([
      { tx: 'rb1', status: 'dead' },
      { tx: 'rb2', status: 'waiting' },
    ]);
    expect(await rowsOf(skipped)).toEqual([{ tx: 'rs2', status: 'delivered' }]);
    expect((await ops.blockedKeys()).map((k) => k.key)).toContain(blocked);
    expect((await ops.stats()).blockedKeys).toBeGreaterThanOrEqual(1);
    // Discarded, it lets its key go on; then retention has nothing of the key's to keep.
    await ops.discard({ ids: [(await ops.blockedKeys()).find((k) => k.key === blocked)!.headId] });
    await drainAll();
    expect(sink.seen.get(blocked)).toEqual(['rb2']);
  });

  // SQLite has one writer at a time: a retention pass cannot overlap a transaction that publishes.
  (isSqlite(backend) ? it.skip : it)(
    'leaves the row of an idle key that a transaction publishes to while retention runs: the key’s next event waits behind it',
    async () => {
      const key = `busy-${Date.now()}`;
      await inTx(() => publish('order.changed', key, 'p1'));
      await drainAll();
      const published = deferred();
      const commit = deferred();
      const publishing = inTx(async () => {
        await publish('order.changed', key, 'p2');
        published.resolve();
        await commit.promise;
      });
      await published.promise;
      let passed = false;
      const pass = app.worker.purge().finally(() => (passed = true));
      // The pass passes over the key's row the publisher holds, or waits for it: either, before the commit.
      await eventually(
        async () => passed || (await waitsForLock(app, `${app.table}_keys`)),
        10_000,
        'the retention pass to end or to wait for the publisher',
      );
      commit.resolve();
      await publishing;
      await pass;
      await inTx(() => publish('order.changed', key, 'p3'));
      expect(await rowsOf(key)).toEqual([
        { tx: 'p1', status: 'delivered' },
        { tx: 'p2', status: 'pending' },
        { tx: 'p3', status: 'waiting' },
      ]);
      await drainAll();
      expect(sink.seen.get(key)).toEqual(['p1', 'p2', 'p3']);
      expect(sink.mostInFlight).toBe(1);
    },
  );

  it('gives back the runs of the crash suspects it does not run with them, uncounted: taken again at once', async () => {
    const [a, b] = ['sus-a', 'sus-b'].map((k) => `${k}-${Date.now()}`);
    await inTx(() =>
      app.outbox.publishMany(
        [a, b].flatMap((key) =>
          [1, 2, 3].map((n) => ({ topic: 'order.changed', payload: { tx: `${key}/${n}` }, key })),
        ),
      ),
    );
    // A worker claims both keys' first events with the events behind them, and dies: their leases run out.
    const died = await app.store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 2, lanes: 10 });
    expect(died.events.map((e) => e.key).sort()).toEqual([a, b].sort());
    expect([...died.runs.values()].flat()).toHaveLength(4);
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    await drainAll();
    for (const key of [a, b]) {
      expect(sink.seen.get(key)).toEqual([1, 2, 3].map((n) => `${key}/${n}`));
      // Each ran once here, its second attempt (the first was the dead worker's): none dead-lettered unrun.
      const rows = (await outboxRows(app)).filter((r) => r.key === key);
      expect(rows.map((r) => [r.status, Number(r.attempts)])).toEqual(rows.map(() => ['delivered', 2]));
    }
  });

  it('ends a run whose front’s acknowledgement is refused (another claim took the key): nothing behind it starts', async () => {
    const key = `taken-${Date.now()}`;
    await inTx(() =>
      app.outbox.publishMany(['t1', 't2', 't3'].map((tx) => ({ topic: 'order.changed', payload: { tx }, key }))),
    );
    const ids = (await outboxRows(app))
      .filter((r) => r.key === key)
      .sort((x, y) => Number(x.seq) - Number(y.seq))
      .map((r) => String(r.id));
    const expire = () =>
      app.raw.query(app.sql(`UPDATE "${app.table}" SET "available_at" = ${TWO_HOURS_AGO[backend]} WHERE "key" = ?`), [
        key,
      ]);
    const starts: string[] = [];
    let other: ClaimResult | undefined;
    sink.starting = async (m) => {
      if (m.key !== key) return;
      starts.push(m.payload.tx);
      if (starts.length > 1) return;
      // The key's lease runs out while t1 runs; another worker claims the key, t2 and t3 behind t1, and
      // gives them back at once (it was shutting down): this worker's token holds none of them now.
      await expire();
      // On MySQL the worker's own claim may hold the front's row for a moment, and SKIP LOCKED passes over
      // it then: the other worker claims again, as it would at its next poll (see claimAsAnotherWorker).
      other = await eventually(
        async () => {
          const claim = await app.store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 5, lanes: 10 });
          const all = [...claim.events, ...[...claim.runs.values()].flat()].map((e) => e.id);
          await app.store.releaseMany(all, claim.token, true);
          return claim.events.some((e) => e.key === key) ? claim : undefined;
        },
        10_000,
        'another worker’s claim of the key',
      );
    };
    await drainAll();
    expect(other!.events.filter((e) => e.key === key).map((e) => e.id)).toEqual([ids[0]]);
    expect(other!.runs.get(ids[0])!.map((e) => e.id)).toEqual(ids.slice(1));
    // t1's success was not recorded: it runs again, and t2 and t3 only after it, once each.
    expect(starts).toEqual(['t1', 't1', 't2', 't3']);
    expect((await rowsOf(key)).map((r) => r.status)).toEqual(['delivered', 'delivered', 'delivered']);
  });

  it('fails a key’s events that nothing handles as any other failure: its head dies and blocks the key, and drains end', async () => {
    const key = `unhandled-${Date.now()}`;
    await inTx(async () => {
      for (const n of [1, 2, 3]) await publish('order.unhandled', key, `u${n}`);
    });
    await drainAll();
    expect(await rowsOf(key)).toEqual([
      { tx: 'u1', status: 'dead' },
      { tx: 'u2', status: 'waiting' },
      { tx: 'u3', status: 'waiting' },
    ]);
    const [blocked] = (await app.module.get(OutboxOperations).blockedKeys()).filter((k) => k.key === key);
    expect(blocked).toMatchObject({ attempts: 2, waiting: 2 });
    expect(blocked.error).toContain('no handler or route for topic "order.unhandled"');
  });

  it('rolls back a key’s numbers with the transaction that took them', async () => {
    const key = `rb-${Date.now()}`;
    const failed = deferred();
    await expect(
      inTx(async () => {
        await publish('order.changed', key, 'r1');
        failed.resolve();
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    await failed.promise;
    await inTx(() => publish('order.changed', key, 'r2'));
    await drainAll();
    expect(sink.seen.get(key)).toEqual(['r2']);
    expect((await outboxRows(app)).filter((r) => r.key === key).map((r) => Number(r.seq))).toEqual([1]);
  });
  it('moves a key on at a worker’s start when its first event finished without it (an older worker acknowledged it)', async () => {
    const key = `swept-${Date.now()}`;
    await inTx(async () => {
      await publish('order.changed', key, 'w1');
      await publish('order.changed', key, 'w2');
    });
    // What a worker of a version before per-key order does: acknowledge, and nothing else.
    await app.raw.query(
      app.sql(`UPDATE "${app.table}" SET "status" = 'delivered' WHERE "key" = ? AND "status" = 'pending'`),
      [key],
    );
    await drainAll();
    expect(await rowsOf(key)).toEqual([
      { tx: 'w1', status: 'delivered' },
      { tx: 'w2', status: 'waiting' },
    ]);
    // Last in this file: a second app takes over Nest's logger (app.logger hears nothing more).
    const worker = await createTestApp({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      providers: [Sink],
      outbox: { ordering: ORDERING, worker: { enabled: true, pollIntervalMs: 50 } },
    });
    try {
      await eventually(async () => (await rowsOf(key))[1].status === 'delivered', 10_000, 'w2 delivered');
      expect(worker.logger.matching(/ordered key\(s\) whose first event had finished went on/)).toHaveLength(1);
    } finally {
      await worker.close();
      await worker.raw.close();
    }
  });
});

// The database itself keeps "of an ordered key only its front is pending" (schema version 9) where it has partial
// unique indexes. Not on MariaDB: MySQL/MariaDB have none, and there the outbox's writes alone keep the rule (see
// docs/databases.md).
describe.each(backends().filter((b) => b !== 'mariadb'))('the schema guarding a key’s front on %s', (backend) => {
  let app: TestApp;

  beforeAll(async () => {
    app = await createTestApp({ backend, outbox: { ordering: ORDERING } });
  });
  afterAll(() => app.dispose());

  // By its message: a native driver's error may come from another realm than this test's Error (better-sqlite3
  // loaded by both jest projects in one process), which toThrow() does not take for an error.
  const refused = (write: Promise<unknown>) =>
    expect(write).rejects.toHaveProperty('message', expect.stringMatching(/unique constraint/i));

  it('refuses a second pending event of an ordered key, by insert or by update; an unordered one of the key is no concern of it', async () => {
    const key = `guard-${Date.now()}`;
    await app.txHost.withTransaction(async () => {
      await app.outbox.publish('order.changed', { tx: 'g1' }, { key });
      await app.outbox.publish('order.changed', { tx: 'g2' }, { key });
    });
    const [front, next] = (await outboxRows(app)).filter((r) => r.key === key);
    expect([front.status, next.status]).toEqual(['pending', 'waiting']);
    const setStatus = (id: unknown, status: string) =>
      app.raw.query(app.sql(`UPDATE "${app.table}" SET "status" = ? WHERE "id" = ?`), [status, id]);
    const insert = (status: string, seq: number | null) =>
      app.raw.query(
        app.sql(
          `INSERT INTO "${app.table}" ("id", "topic", "key", "payload", "headers", "status", "completed_handlers", "seq") ` +
            `VALUES (?, 'order.changed', ?, '{}', '{}', ?, '[]', ?)`,
        ),
        [randomUUID(), key, status, seq],
      );

    await refused(setStatus(next.id, 'pending'));
    await refused(insert('pending', 3));
    // Waiting behind the front, or not numbered (a topic without order): not the front's rival.
    await insert('waiting', 3);
    await insert('pending', null);
    // Once the front is finished, the next one may be pending.
    await setStatus(front.id, 'delivered');
    await setStatus(next.id, 'pending');
    await refused(setStatus(front.id, 'pending'));
  });
});
