import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, it } from 'node:test';
import { Body, Controller, Get, Inject, Param, ParseUUIDPipe, Post } from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import { OutboxNonRetryableError, OutboxOperations, OutboxService, requireChanged } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

/**
 * The admin controller of docs/operations.md, plus two endpoints of an application's own that reach the
 * library's other HTTP errors. Its decorators are applied by hand: plain JavaScript has none yet.
 */
class OutboxAdminController {
  constructor(operations, outbox, txHost) {
    this.operations = operations;
    this.outbox = outbox;
    this.txHost = txHost;
  }

  event(id) {
    return this.operations.getOrFail(id);
  }

  async redrive(id) {
    return requireChanged(await this.operations.redrive({ ids: [id] }));
  }

  redriveDelivered() {
    return this.operations.redrive({ filter: { status: 'delivered' } });
  }

  publish(body) {
    return this.txHost.withTransaction(() =>
      this.outbox.publish('http.placed', body.payload, { dedupeKey: body.dedupeKey }),
    );
  }
}
const route = (method, decorators) => {
  const prototype = OutboxAdminController.prototype;
  for (const decorate of decorators) decorate(prototype, method, Object.getOwnPropertyDescriptor(prototype, method));
};
route('event', [Get('events/:id')]);
Param('id', ParseUUIDPipe)(OutboxAdminController.prototype, 'event', 0);
route('redrive', [Post('events/:id/redrive')]);
Param('id', ParseUUIDPipe)(OutboxAdminController.prototype, 'redrive', 0);
route('redriveDelivered', [Post('redrive-delivered')]);
route('publish', [Post('publish')]);
Body()(OutboxAdminController.prototype, 'publish', 0);
[OutboxOperations, OutboxService, TransactionHost].forEach((token, index) =>
  Inject(token)(OutboxAdminController, undefined, index),
);
Controller('admin/outbox')(OutboxAdminController);

class Placed {
  async handle() {}
}
handlerClass(Placed, 'handle', 'http.placed');

class Doomed {
  async handle() {
    throw new OutboxNonRetryableError('the warehouse is gone');
  }
}
handlerClass(Doomed, 'handle', 'http.doomed');

for (const backend of BACKENDS) {
  describe(`the library's errors as HTTP answers through NestJS 12's exception filter on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    const start = async () => {
      app = await startApp(backend, {
        http: true,
        controllers: [OutboxAdminController],
        providers: [Placed, Doomed],
        outbox: { worker: { enabled: false } },
      });
    };
    const call = async (method, path, body) => {
      const response = await fetch(`${app.url}/admin/outbox${path}`, {
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: await response.json() };
    };
    const deadLetter = async () => {
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish('http.doomed', { n: 1 }));
      await app.worker.drain();
      return id;
    };

    it('answers 400 with the message for a bad operations filter, and changes nothing', async () => {
      await start();
      const id = await deadLetter();
      const answer = await call('POST', '/redrive-delivered');
      assert.deepEqual(answer, {
        status: 400,
        body: {
          statusCode: 400,
          message:
            'Invalid outbox selection.filter.status: redrive applies to dead events only: ' +
            'leave status out or set it to "dead"',
        },
      });
      assert.equal((await app.row(id)).status, 'dead');
    });

    it('answers 404 with the message for an unknown event id, on a read and on a redrive', async () => {
      await start();
      const unknown = randomUUID();
      const expected = { status: 404, body: { statusCode: 404, message: `No outbox event has the id ${unknown}` } };
      assert.deepEqual(await call('GET', `/events/${unknown}`), expected);
      assert.deepEqual(await call('POST', `/events/${unknown}/redrive`), expected);
    });

    it('answers 409 with the message for a redrive that changes nothing, after one that did (201)', async () => {
      await start();
      const id = await deadLetter();
      const first = await call('POST', `/events/${id}/redrive`);
      assert.deepEqual(
        { status: first.status, matched: first.body.matched, changed: first.body.changed, skipped: first.body.skipped },
        { status: 201, matched: 1, changed: 1, skipped: [] },
      );
      assert.deepEqual(await call('POST', `/events/${id}/redrive`), {
        status: 409,
        body: {
          statusCode: 409,
          message: `The outbox event ${id} is due: the operation did not apply to it, nothing changed`,
        },
      });
    });

    it('answers 409 for a dedupe key published again with other content, and writes nothing', async () => {
      await start();
      const dedupeKey = `order-${randomUUID()}`;
      assert.equal((await call('POST', '/publish', { dedupeKey, payload: { n: 1 } })).status, 201);
      const conflict = await call('POST', '/publish', { dedupeKey, payload: { n: 2 } });
      assert.equal(conflict.status, 409);
      assert.equal(conflict.body.statusCode, 409);
      assert.match(
        conflict.body.message,
        /^An outbox event with dedupeKey ".*" already exists .* with different content/,
      );
      const rows = await app.rows();
      assert.deepEqual(
        rows.map((row) => (typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload)),
        [{ n: 1 }],
      );
    });
  });
}
