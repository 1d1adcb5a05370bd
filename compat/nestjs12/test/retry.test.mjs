import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { OutboxNonRetryableError } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

/** Fails its first `failures` calls, then succeeds; records the attempt number of each call. */
class Flaky {
  failures = 1;
  attempts = [];
  async handle(message) {
    this.attempts.push(message.attempt);
    if (this.attempts.length <= this.failures) throw new Error(`flaky failure ${this.attempts.length}`);
  }
}
handlerClass(Flaky, 'handle', 'invoice.created');

class Refusing {
  calls = 0;
  async handle() {
    this.calls++;
    throw new OutboxNonRetryableError('the invoice is malformed');
  }
}
handlerClass(Refusing, 'handle', 'invoice.malformed');

for (const backend of BACKENDS) {
  describe(`retries and dead letters on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    const publish = (topic, payload) => app.txHost.withTransaction(() => app.outbox.publish(topic, payload));

    it('retries a failed handler and delivers on the next attempt (no backoff delay)', async () => {
      app = await startApp(backend, {
        providers: [Flaky],
        outbox: { worker: { enabled: false }, retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 } },
      });
      const { id } = await publish('invoice.created', { invoice: 1 });

      // A zero delay makes the event due at once: the same drain claims it again.
      const drained = await app.worker.drain();
      assert.equal(drained.failed, 1);
      assert.equal(drained.delivered, 1);
      assert.deepEqual(app.context.get(Flaky).attempts, [1, 2]);
      const row = await app.row(id);
      assert.equal(row.status, 'delivered');
      assert.equal(Number(row.attempts), 2);
    });

    it('backs off: a failed event is recorded with its error and not due again at once', async () => {
      app = await startApp(backend, {
        providers: [Flaky],
        outbox: { worker: { enabled: false }, retry: { maxAttempts: 3, initialDelayMs: 3_600_000, maxDelayMs: 3_600_000 } },
      });
      const { id } = await publish('invoice.created', { invoice: 2 });

      const first = await app.worker.drain();
      assert.equal(first.failed, 1);
      assert.equal(first.delivered, 0);
      const row = await app.row(id);
      assert.equal(row.status, 'pending');
      assert.equal(Number(row.attempts), 1);
      assert.equal(row.claim_token, null);
      assert.match(String(row.last_error), /flaky failure 1/);
      // The backoff (up to an hour, jittered) put the retry later: nothing is claimable now.
      const second = await app.worker.drain();
      assert.equal(second.failed + second.delivered + second.deadLettered, 0);
      assert.deepEqual(app.context.get(Flaky).attempts, [1]);
    });

    it('dead-letters an event after maxAttempts, keeping its last error', async () => {
      app = await startApp(backend, {
        providers: [Flaky],
        outbox: { worker: { enabled: false }, retry: { maxAttempts: 1, initialDelayMs: 0, maxDelayMs: 0 } },
      });
      const { id } = await publish('invoice.created', { invoice: 3 });

      const drained = await app.worker.drain();
      assert.equal(drained.deadLettered, 1);
      assert.equal(drained.delivered, 0);
      const row = await app.row(id);
      assert.equal(row.status, 'dead');
      assert.equal(Number(row.attempts), 1);
      assert.match(String(row.last_error), /flaky failure 1/);
      assert.deepEqual(app.context.get(Flaky).attempts, [1]);
    });

    it('dead-letters at once when the handler throws OutboxNonRetryableError', async () => {
      app = await startApp(backend, { providers: [Refusing], outbox: { worker: { enabled: false }, retry: { maxAttempts: 10 } } });
      const { id } = await publish('invoice.malformed', { invoice: 4 });

      const drained = await app.worker.drain();
      assert.equal(drained.deadLettered, 1);
      const row = await app.row(id);
      assert.equal(row.status, 'dead');
      assert.equal(Number(row.attempts), 1);
      assert.match(String(row.last_error), /the invoice is malformed/);
      assert.equal(app.context.get(Refusing).calls, 1);
    });
  });
}
