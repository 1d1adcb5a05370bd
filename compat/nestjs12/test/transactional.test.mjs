import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { TransactionHost } from '@nestjs-cls/transactional';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

/**
 * Writes an order per call through nestjs-cls's TransactionHost (the handler's transaction), and fails its
 * first call after writing: only the second call's order may stay.
 */
class Ledger {
  app;
  calls = [];
  async write(message) {
    this.calls.push(message.attempt);
    const { app } = this;
    await TransactionHost.getInstance().tx.query(
      app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`),
      [`${message.id}#${message.attempt}`, 'ledger'],
    );
    assert.ok(message.manager, 'a transactional handler is handed its transaction');
    if (message.attempt === 1) throw new Error('declined after writing');
  }
}
handlerClass(Ledger, 'write', 'ledger.entry', { transactional: true });

for (const backend of BACKENDS) {
  describe(`transactional handlers on NestJS 12 on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    it('rolls back a failed attempt’s writes and commits the retry’s with its success', async () => {
      app = await startApp(backend, {
        providers: [Ledger],
        outbox: { worker: { enabled: false }, retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 } },
      });
      const ledger = app.context.get(Ledger);
      ledger.app = app;
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish('ledger.entry', { amount: 5 }));
      const result = await app.worker.drain();
      assert.equal(result.delivered, 1);
      assert.equal(result.failed, 1);
      assert.deepEqual(ledger.calls, [1, 2]);
      const orders = await app.raw.query(`SELECT "id" FROM "${app.ordersTable}"`);
      assert.deepEqual(orders.map((o) => o.id), [`${id}#2`]);
      assert.equal((await app.row(id)).status, 'delivered');
    });
  });
}
