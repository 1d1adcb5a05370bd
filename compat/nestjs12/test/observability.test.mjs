import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { Registry } from 'prom-client';
import { currentOutboxMessage } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

class Orders {
  /** The running event, as a logger's mixin reads it, after an await. */
  static current = [];
  async placed() {
    await trace.getTracer('compat').startActiveSpan('charge card', async (span) => span.end());
    Orders.current.push(currentOutboxMessage());
  }
}
handlerClass(Orders, 'placed', 'order.placed');

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

for (const backend of BACKENDS) {
  describe(`tracing and Prometheus metrics on NestJS 12 on ${backend}`, () => {
    let app;
    before(() => provider.register());
    after(async () => {
      await provider.forceFlush();
      trace.disable();
      context.disable();
      propagation.disable();
    });
    afterEach(() => app?.dispose());

    it("continues the publisher's trace into the handler, and counts the delivery", async () => {
      exporter.reset();
      const registry = new Registry();
      app = await startApp(backend, {
        providers: [Orders],
        outbox: { worker: { enabled: false }, metrics: { prometheus: registry } },
      });
      Orders.current.length = 0;
      let id;
      const publisher = await trace.getTracer('compat').startActiveSpan('POST /orders', async (span) => {
        ({ id } = await app.txHost.withTransaction(() =>
          app.outbox.publish('order.placed', { n: 1 }, { key: 'order-1' }),
        ));
        span.end();
        return span.spanContext();
      });
      assert.equal((await app.worker.drain()).delivered, 1);
      assert.deepEqual(Orders.current, [{ eventId: id, topic: 'order.placed', key: 'order-1', attempt: 1 }]);
      assert.equal(currentOutboxMessage(), undefined);

      // publish() is a producer span under the request's; the attempt continues it.
      const [create] = exporter.getFinishedSpans().filter((s) => s.name === 'create order.placed');
      assert.equal(create.parentSpanContext?.spanId, publisher.spanId);
      const [attempt] = exporter.getFinishedSpans().filter((s) => s.name === 'process order.placed');
      assert.equal(attempt.spanContext().traceId, publisher.traceId);
      assert.equal(attempt.parentSpanContext?.spanId, create.spanContext().spanId);
      assert.equal(attempt.attributes['outbox.outcome'], 'success');
      const [charge] = exporter.getFinishedSpans().filter((s) => s.name === 'charge card');
      assert.equal(charge.parentSpanContext?.spanId, attempt.spanContext().spanId);

      const text = await registry.metrics();
      assert.match(text, /^outbox_deliveries_total\{topic="order\.placed",target="Orders\.placed",outcome="delivered"\} 1$/m);
      assert.match(text, /^outbox_events_published_total\{topic="order\.placed"\} 1$/m);
      // The histograms (the outbox's own, read by the registry): one handler call, one claim at least.
      assert.match(
        text,
        /^outbox_delivery_duration_seconds_count\{topic="order\.placed",target="Orders\.placed",outcome="success"\} 1$/m,
      );
      assert.match(
        text,
        /^outbox_delivery_duration_seconds_bucket\{le="\+Inf",topic="order\.placed",target="Orders\.placed",outcome="success"\} 1$/m,
      );
      assert.match(text, /^outbox_claim_duration_seconds_count [1-9]\d*$/m);
    });
  });
}
