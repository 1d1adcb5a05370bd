import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { firstValueFrom, filter } from 'rxjs';
import {
  OutboxEvents,
  OutboxHandler,
  OutboxService,
  type OutboxMessage,
  type OutboxHandlerFailedEvent,
} from '../../../lib';
import { backends, isSqlite, sql, type BackendName } from '../../fixtures/backends';
import { deferred } from '../../fixtures/eventually';
import { createTestApp, emptyTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

/** What the handlers do, set by each test. */
@Injectable()
class Script {
  /** The orders table the handlers write to. */
  orders = '';
  backend: BackendName = 'better-sqlite3';
  /** Run by the transactional handler after its writes, before it returns: throw to fail the attempt. */
  afterWrites: (message: OutboxMessage) => Promise<void> | void = () => undefined;
  /** Run by the plain handler of `both.placed`: throw to fail the attempt. */
  plain: (message: OutboxMessage) => void = () => undefined;
  calls: Array<{ handler: string; id: string; attempt: number }> = [];
  managers: unknown[] = [];
}

@Injectable()
class Ledger {
  constructor(
    private readonly script: Script,
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly outbox: OutboxService,
  ) {}

  /** Writes one order per event through nestjs-cls, and announces it: all in the handler's transaction. */
  private async write(message: OutboxMessage) {
    const { script } = this;
    script.managers.push(message.manager);
    await this.txHost.tx.query(sql(script.backend, `INSERT INTO "${script.orders}" ("id", "note") VALUES (?, ?)`), [
      `${message.id}#${message.attempt}`,
      message.topic,
    ]);
    await this.outbox.publish('ledger.written', { event: message.id });
    await script.afterWrites(message);
  }

  @OutboxHandler('ledger.entry', { transactional: true })
  async entry(message: OutboxMessage) {
    this.script.calls.push({ handler: 'entry', id: message.id, attempt: message.attempt });
    await this.write(message);
  }

  @OutboxHandler('both.placed', { transactional: true })
  async inTransaction(message: OutboxMessage) {
    this.script.calls.push({ handler: 'inTransaction', id: message.id, attempt: message.attempt });
    await this.write(message);
  }

  @OutboxHandler('both.placed')
  outside(message: OutboxMessage) {
    this.script.calls.push({ handler: 'outside', id: message.id, attempt: message.attempt });
    this.script.plain(message);
  }

  @OutboxHandler('ordered.entry', { transactional: true })
  async ordered(message: OutboxMessage) {
    this.script.calls.push({ handler: 'ordered', id: message.id, attempt: message.attempt });
    await this.write(message);
  }

  @OutboxHandler('ledger.written')
  announced() {}
}

describe.each(backends())('transactional handlers on %s', (backend) => {
  let app: TestApp;
  let script: Script;

  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [Script, Ledger],
      outbox: {
        retry: { initialDelayMs: 0, maxDelayMs: 0 },
        ordering: [{ topic: 'ordered.*' }],
        worker: { handlerTimeoutMs: 300 },
      },
    });
  });
  afterAll(() => app.dispose());
  beforeEach(async () => {
    await emptyTestApp(app);
    script = app.module.get(Script);
    Object.assign(script, new Script(), { orders: app.ordersTable, backend });
  });

  const orders = async () =>
    (await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.ordersTable}" ORDER BY "id"`)).map((r) => r.id);
  const announcements = async (): Promise<unknown[]> =>
    (await outboxRows(app))
      .filter((r) => r.topic === 'ledger.written')
      .map((r): unknown => (typeof r.payload === 'string' ? (JSON.parse(r.payload) as unknown) : r.payload));
  const publish = (topic: string, count = 1, key?: string) =>
    app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: count }, (_, n) => ({ topic, payload: { n }, key }))),
    );

  it('commits the handler’s writes, the events it publishes and its success together', async () => {
    const [{ id }] = await publish('ledger.entry');
    const result = await app.worker.drain();
    expect(result).toMatchObject({ failed: 0, deadLettered: 0 });
    expect(await orders()).toEqual([`${id}#1`]);
    expect(await announcements()).toEqual([{ event: id }]);
    const row = (await outboxRows(app)).find((r) => r.id === id)!;
    expect(row).toMatchObject({ status: 'delivered' });
    expect(Number(row.attempts)).toBe(1);
    // The handler was handed the transaction it ran in.
    expect(script.managers).toHaveLength(1);
    expect(script.managers[0]).toBeDefined();
  });

  it('rolls back the handler’s writes and what it published when it fails; the retry starts clean', async () => {
    script.afterWrites = (message) => {
      if (message.attempt === 1) throw new Error('declined');
    };
    const [{ id }] = await publish('ledger.entry');
    // The event and its announcement.
    expect(await app.worker.drain()).toMatchObject({ delivered: 2, failed: 1 });
    // Only the second attempt's order and announcement are there.
    expect(await orders()).toEqual([`${id}#2`]);
    expect(await announcements()).toEqual([{ event: id }]);
  });

  it('rolls back a handler that timed out, even when it returns afterwards', async () => {
    const late = deferred();
    script.afterWrites = async (message) => {
      if (message.attempt === 1) await late.promise;
    };
    const [{ id }] = await publish('ledger.entry');
    // The first attempt times out while its handler still holds its transaction open (on SQLite, the
    // database: recording the failure waits for the handler to return).
    const timedOut = firstValueFrom(
      app.module
        .get(OutboxEvents)
        .events$.pipe(filter((e): e is OutboxHandlerFailedEvent => e.type === 'handler.failed')),
    );
    const draining = app.worker.drain();
    expect((await timedOut).error).toMatch(/300 ms/);
    late.resolve();
    await draining;
    expect(await orders()).toEqual([`${id}#2`]);
  });

  it('keeps a success of a transactional handler when another target of the event fails: the retry skips it', async () => {
    script.plain = (message) => {
      if (message.attempt === 1) throw new Error('broker down');
    };
    const [{ id }] = await publish('both.placed');
    expect(await app.worker.drain()).toMatchObject({ delivered: 2, failed: 1 });
    expect(script.calls.map((c) => `${c.handler}@${c.attempt}`).sort()).toEqual([
      'inTransaction@1',
      'outside@1',
      'outside@2',
    ]);
    expect(await orders()).toEqual([`${id}#1`]);
  });

  it('acknowledges, running nothing, an event whose every target succeeded before its acknowledgement was lost', async () => {
    // As a worker that died after the handler's transaction committed leaves it: its success recorded, the
    // event still pending.
    const [{ id }] = await publish('ledger.entry');
    const done = app.backend === 'postgres' ? `'["Ledger.entry"]'::jsonb` : `'["Ledger.entry"]'`;
    await app.dataSource.query(
      app.sql(`UPDATE "${app.table}" SET "completed_handlers" = ${done} WHERE "id" = '${id}'`),
    );
    expect(await app.worker.drain()).toMatchObject({ delivered: 1, failed: 0, deferred: 0, deadLettered: 0 });
    expect(script.calls).toEqual([]);
    expect((await outboxRows(app)).find((r) => r.id === id)).toMatchObject({ status: 'delivered' });
  });

  it('leaves nothing of an attempt whose claim was lost before the handler committed', async () => {
    script.afterWrites = async (message) => {
      if (message.attempt > 1) return;
      // Another claim takes the event. On SQLite only one writer at a time exists, and the handler's
      // transaction is it: the token changes inside that transaction, which then rolls back whole.
      const statement = `UPDATE "${app.table}" SET "claim_token" = ? WHERE "id" = ?`;
      const args = [randomUUID(), message.id];
      if (isSqlite(backend)) await message.manager!.query(statement, args);
      else await app.raw.query(app.sql(statement), args);
    };
    const failures: OutboxHandlerFailedEvent[] = [];
    const subscription = app.module
      .get(OutboxEvents)
      .events$.pipe(filter((e): e is OutboxHandlerFailedEvent => e.type === 'handler.failed'))
      .subscribe((e) => failures.push(e));
    const [{ id }] = await publish('ledger.entry');
    await app.worker.drain();
    subscription.unsubscribe();
    expect(failures.map((f) => [f.attempt, f.error])).toEqual([
      [1, expect.stringMatching(/lease of outbox event .* was lost/)],
    ]);
    // Nothing of the first attempt: no order, no announcement; whatever a later claim delivered, once.
    const written = await orders();
    expect(written).not.toContain(`${id}#1`);
    expect(written.length).toBeLessThanOrEqual(1);
    expect(await announcements()).toHaveLength(written.length);
  });

  it('delivers an ordered key’s events in order, each handler transaction on its own', async () => {
    const published = await publish('ordered.entry', 4, 'account-1');
    expect(await app.worker.drain()).toMatchObject({ failed: 0 });
    expect(script.calls.filter((c) => c.handler === 'ordered').map((c) => c.id)).toEqual(published.map((e) => e.id));
    expect(await orders()).toEqual(published.map((e) => `${e.id}#1`).sort());
  });
});
