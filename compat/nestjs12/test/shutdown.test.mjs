import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { SchedulerRegistry } from '@nestjs/schedule';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';
import { deferred, eventually } from '../support/waiting.mjs';

/** Holds each call until `gate` opens. */
class Slow {
  entered = deferred();
  gate = deferred();
  calls = [];
  aborted = false;
  async handle(message) {
    this.calls.push(message);
    message.signal.addEventListener('abort', () => (this.aborted = true));
    this.entered.resolve();
    await this.gate.promise;
  }
}
handlerClass(Slow, 'handle', 'report.requested');

for (const backend of BACKENDS) {
  describe(`graceful shutdown on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    it('app.close() waits for the running handler, acknowledges it, and gives back the unstarted events', async () => {
      app = await startApp(backend, {
        providers: [Slow],
        outbox: { worker: { pollIntervalMs: 50, concurrency: 1, shutdownTimeoutMs: 30_000 } },
      });
      const slow = app.context.get(Slow);
      const published = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([0, 1, 2].map((n) => ({ topic: 'report.requested', payload: { n } }))),
      );
      await slow.entered.promise;

      const schedule = app.context.get(SchedulerRegistry);
      const interval = `outbox-worker:${app.table}`;
      assert.ok(schedule.doesExist('interval', interval));

      let closed = false;
      const closing = app.close().then(() => (closed = true));
      // The worker takes its interval out of the registry as its shutdown begins; from then on it
      // must hold app.close() until the running handler is done.
      await eventually(() => !schedule.doesExist('interval', interval), 'the worker to stop polling');
      assert.equal(closed, false, 'app.close() returned while a handler was running');
      slow.gate.resolve();
      await closing;

      const started = slow.calls[0].id;
      assert.equal(slow.calls.length, 1);
      assert.equal(slow.aborted, false);
      const finished = await app.row(started);
      assert.equal(finished.status, 'delivered');
      assert.equal(finished.claim_token, null);
      for (const { id } of published.filter((p) => p.id !== started)) {
        const row = await app.row(id);
        assert.equal(row.status, 'pending');
        assert.equal(Number(row.attempts), 0);
        assert.equal(row.claim_token, null);
      }
    });
  });
}
