import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { SchedulerRegistry } from '@nestjs/schedule';
import { OutboxTransactionRequiredError } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';
import { deferred, eventually } from '../support/waiting.mjs';

class OrderPlaced {
  received = [];
  first = deferred();
  async handle(message) {
    this.received.push(message);
    this.first.resolve(message);
  }
}
handlerClass(OrderPlaced, 'handle', 'order.placed');

for (const backend of BACKENDS) {
  describe(`publish and delivery on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    it('publishes in the ambient transaction and the scheduled worker delivers after commit', async () => {
      app = await startApp(backend, { providers: [OrderPlaced], outbox: { worker: { pollIntervalMs: 50 } } });
      const handler = app.context.get(OrderPlaced);
      assert.ok(app.context.get(SchedulerRegistry).getIntervals().includes(`outbox-worker:${app.table}`));

      const { id, inserted } = await app.txHost.withTransaction(async () => {
        await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), ['o-1', 'placed']);
        return app.outbox.publish('order.placed', { orderId: 'o-1', amount: 42 }, { key: 'o-1', headers: { 'x-trace': 't1' } });
      });
      assert.equal(inserted, true);

      const message = await handler.first.promise;
      assert.equal(message.id, id);
      assert.equal(message.topic, 'order.placed');
      assert.equal(message.key, 'o-1');
      assert.equal(message.attempt, 1);
      assert.deepEqual(message.payload, { orderId: 'o-1', amount: 42 });
      assert.deepEqual(message.headers, { 'x-trace': 't1' });
      const row = await eventually(async () => {
        const current = await app.row(id);
        return current.status === 'delivered' && current;
      }, 'the acknowledgement');
      assert.equal(Number(row.attempts), 1);
      assert.equal(row.claim_token, null);
      assert.equal(handler.received.length, 1);
    });

    it('writes nothing when the transaction rolls back, and refuses to publish outside one', async () => {
      app = await startApp(backend, { providers: [OrderPlaced], outbox: { worker: { enabled: false } } });
      await assert.rejects(
        app.txHost.withTransaction(async () => {
          await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), ['o-2', 'placed']);
          await app.outbox.publish('order.placed', { orderId: 'o-2' });
          throw new Error('the order was refused');
        }),
        /the order was refused/,
      );
      await assert.rejects(app.outbox.publish('order.placed', { orderId: 'o-3' }), OutboxTransactionRequiredError);

      assert.deepEqual(await app.rows(), []);
      assert.deepEqual(await app.raw.query(`SELECT * FROM "${app.ordersTable}"`), []);
      const drained = await app.worker.drain();
      assert.equal(drained.delivered + drained.failed + drained.deadLettered, 0);
      assert.equal(app.context.get(OrderPlaced).received.length, 0);
    });
  });
}
