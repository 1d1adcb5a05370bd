import assert from 'node:assert/strict';
import { createHmac, randomUUID } from 'node:crypto';
import { afterEach, describe, it } from 'node:test';
import { Body, Controller, Inject, Post } from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import { OutboxInbox, OutboxInboxService, WebhookTransport } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { startApp } from '../support/app.mjs';

const SECRET = 'compat-inbox-secret';

/** The documented signature: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
const sign = (body, secret = SECRET) => {
  const t = Math.floor(Date.now() / 1000);
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
};

/** A receiving service's webhook route, its decorators applied by hand (plain JavaScript has none yet). */
class Hooks {
  static app;
  static calls = [];
  constructor(txHost) {
    this.txHost = txHost;
  }
  async charge(envelope) {
    Hooks.calls.push(envelope.id);
    await this.txHost.tx.query(Hooks.app.sql(`INSERT INTO "${Hooks.app.ordersTable}" ("id", "note") VALUES (?, ?)`), [
      envelope.id,
      'charged',
    ]);
    return { charged: envelope.id };
  }
}
{
  const prototype = Hooks.prototype;
  const descriptor = Object.getOwnPropertyDescriptor(prototype, 'charge');
  for (const decorate of [Post(), OutboxInbox('billing')]) decorate(prototype, 'charge', descriptor);
  Body()(prototype, 'charge', 0);
  Inject(TransactionHost)(Hooks, undefined, 0);
  Controller('hooks')(Hooks);
}

for (const backend of BACKENDS) {
  describe(`the inbox on NestJS 12 on ${backend}`, () => {
    let receiver;
    let sender;
    afterEach(async () => {
      await sender?.dispose();
      await receiver?.dispose();
      sender = receiver = undefined;
    });

    it('applies a webhook once, and answers bad requests 401 and 400 through Nest 12’s exception filter', async () => {
      receiver = await startApp(backend, {
        http: true,
        rawBody: true,
        controllers: [Hooks],
        outbox: { worker: { enabled: false } },
        inbox: { webhook: { secret: SECRET } },
      });
      Hooks.app = receiver;
      Hooks.calls = [];
      sender = await startApp(backend, {
        outbox: {
          worker: { enabled: false },
          transports: [new WebhookTransport('hooks', { url: `${receiver.url}/hooks`, secret: SECRET })],
          routes: [{ topic: 'billing.charged', transport: 'hooks' }],
        },
      });
      const { id } = await sender.txHost.withTransaction(() => sender.outbox.publish('billing.charged', { amount: 5 }));
      assert.equal((await sender.worker.drain()).delivered, 1);

      // The same message again, signed: recognised, the handler skipped.
      const body = JSON.stringify({ id, topic: 'billing.charged', key: null, createdAt: new Date().toISOString(), attempt: 2, headers: {}, payload: { amount: 5 } });
      const post = (headers) =>
        fetch(`${receiver.url}/hooks`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body });
      const again = await post({ 'Idempotency-Key': id, 'X-Outbox-Signature': sign(body) });
      assert.equal(again.status, 201);
      assert.equal(await again.text(), '');
      assert.deepEqual(Hooks.calls, [id]);
      const orders = await receiver.raw.query(`SELECT "id" FROM "${receiver.ordersTable}"`);
      assert.deepEqual(orders.map((o) => o.id), [id]);

      const forged = await post({ 'Idempotency-Key': id, 'X-Outbox-Signature': sign(body, 'not-the-secret') });
      assert.equal(forged.status, 401);
      assert.match((await forged.json()).message, /does not match the body/);
      const withoutId = await post({ 'X-Outbox-Signature': sign(body) });
      assert.equal(withoutId.status, 400);
      assert.match((await withoutId.json()).message, /carries no outbox message id/);
      assert.deepEqual(Hooks.calls, [id]);
    });

    it('runs process() once per message id, the work joined through nestjs-cls', async () => {
      receiver = await startApp(backend, { outbox: { worker: { enabled: false } }, inbox: {} });
      const inbox = receiver.context.get(OutboxInboxService);
      const id = randomUUID();
      const work = (note) => () =>
        receiver.txHost.tx.query(receiver.sql(`INSERT INTO "${receiver.ordersTable}" ("id", "note") VALUES (?, ?)`), [note, note]);
      assert.equal((await inbox.process('billing', id, work('first'))).duplicate, false);
      assert.deepEqual(await inbox.process('billing', id, work('second')), { duplicate: true });
      const orders = await receiver.raw.query(`SELECT "id" FROM "${receiver.ordersTable}"`);
      assert.deepEqual(orders.map((o) => o.id), ['first']);
    });
  });
}
