import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';
import { deferred, eventually } from '../support/waiting.mjs';

/** Holds every call until the test opens its gate; counts how many run at once. */
class Report {
  gate = deferred();
  calls = [];
  running = 0;
  maxRunning = 0;
  async render(message) {
    this.calls.push(message.id);
    this.maxRunning = Math.max(this.maxRunning, ++this.running);
    try {
      await this.gate.promise;
    } finally {
      this.running--;
    }
  }
}
handlerClass(Report, 'render', 'order.placed', { concurrency: 1 });

class Mail {
  sent = [];
  send(message) {
    this.sent.push(message.id);
  }
}
handlerClass(Mail, 'send', 'order.placed');

for (const backend of BACKENDS) {
  describe(`a bound per handler, and the target label, on NestJS 12 on ${backend}`, () => {
    let app;
    afterEach(async () => {
      app?.context.get(Report).gate.resolve();
      await app?.dispose();
    });

    it('runs a handler at most its concurrency at once while the same events reach the other handler', async () => {
      const registry = new Registry();
      app = await startApp(backend, {
        providers: [Report, Mail],
        outbox: { worker: { enabled: true, pollIntervalMs: 3_600_000 }, metrics: { prometheus: registry } },
      });
      const report = app.context.get(Report);
      const mail = app.context.get(Mail);
      const ids = [];
      for (let n = 0; n < 3; n++) {
        const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', { n }));
        ids.push(id);
      }
      await eventually(() => mail.sent.length === 3, 'every mail sent while the report is held');
      assert.equal(report.running, 1);
      assert.deepEqual(report.calls, [ids[0]]);

      report.gate.resolve();
      await eventually(
        async () => (await app.rows()).every((row) => row.status === 'delivered'),
        'every event delivered once the report has room',
      );
      assert.deepEqual([...report.calls].sort(), [...ids].sort());
      assert.deepEqual([...mail.sent].sort(), [...ids].sort());
      assert.equal(report.maxRunning, 1);
      const text = await registry.metrics();
      assert.match(text, /outbox_deliveries_total\{topic="order\.placed",target="Mail\.send",outcome="delivered"\} 3/);
      assert.match(text, /outbox_deliveries_total\{topic="order\.placed",target="Report\.render",outcome="delivered"\} 3/);
    });
  });
}
