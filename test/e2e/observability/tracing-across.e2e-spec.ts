import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, RmqContext, Transport, type MicroserviceOptions } from '@nestjs/microservices';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { ClientProxyTransport } from '../../../lib';
import { backends, uniqueName, type BackendName } from '../../fixtures/backends';
import { brokerApp } from '../../fixtures/brokers';
import { startNodeProcess, type RunningChild } from '../../fixtures/child';
import { deferred } from '../../fixtures/eventually';
import { createTestApp, type TestApp } from '../../fixtures/test-app';
import { parentOf, registerTracing } from '../../fixtures/tracing';
import type { ChildConfig } from '../../fixtures/worker-process';

const tracing = registerTracing();
afterAll(() => tracing.close());
const tracer = trace.getTracer('test-app');

/**
 * Publishes one event inside a span of its own; returns the event id, the span's trace and the id of
 * publish()'s span (its child), which the attempt continues.
 */
async function publishInSpan(app: TestApp, topic: string) {
  const published = await tracer.startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish(topic, { n: 1 }));
    span.end();
    return { id, ...span.spanContext() };
  });
  const [create] = tracing
    .named(`create ${topic}`)
    .filter((s) => s.attributes['messaging.message.id'] === published.id);
  expect(parentOf(create)).toBe(published.spanId);
  return { id: published.id, traceId: published.traceId, createSpanId: create.spanContext().spanId };
}

/** A span as the worker process printed it. */
interface PrintedSpan {
  name: string;
  traceId: string;
  spanId: string;
  parent?: string;
  attributes: Record<string, unknown>;
}

describe.each(backends())('tracing with the worker in another process on %s', (backend: BackendName) => {
  let app: TestApp;
  let child: RunningChild | undefined;
  afterEach(async () => {
    child?.process.kill('SIGKILL');
    await child?.exited;
    await app.dispose();
  });

  it("continues the publisher's trace from the context stored with the event, through the database", async () => {
    app = await createTestApp({ backend });
    await app.dataSource.query(
      app.sql(
        `CREATE TABLE "${app.table}_log" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`,
      ),
    );
    const published = await publishInSpan(app, 'work.item');
    const config: ChildConfig = {
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      mode: 'record',
      worker: { pollIntervalMs: 20 },
    };
    child = startNodeProcess('test/fixtures/worker-process.ts', { OUTBOX_CHILD: JSON.stringify(config) }, [
      'test/fixtures/tracing-child.js',
    ]);
    const line = await child.waitFor(/^SPAN .*"process work\.item"/);
    const span = JSON.parse(line.slice('SPAN '.length)) as PrintedSpan;
    expect(span).toMatchObject({
      traceId: published.traceId,
      parent: published.createSpanId,
      attributes: { 'messaging.message.id': published.id, 'outbox.outcome': 'success', 'outbox.attempt': 1 },
    });
  });
});

/** What the consumer app's handler saw and the span it continued with. */
const consumed = deferred<{ traceparent: unknown; traceId: string; parent: string | undefined }>();

@Controller()
class ShippingConsumer {
  @EventPattern('order.shipped')
  shipped(@Ctx() ctx: RmqContext) {
    const headers = (ctx.getMessage() as { properties: { headers: Record<string, string> } }).properties.headers;
    const parent = propagation.extract(context.active(), headers);
    tracer.startActiveSpan('ship order', { kind: SpanKind.CONSUMER }, parent, (span) => {
      span.end();
      consumed.resolve({
        traceparent: headers.traceparent,
        traceId: span.spanContext().traceId,
        parent: trace.getSpanContext(parent)?.spanId,
      });
    });
  }
}

@Module({ controllers: [ShippingConsumer] })
class ShippingModule {}

describe('tracing through RabbitMQ to a Nest microservice', () => {
  it("the consumer receives traceparent and continues the trace under the attempt's span", async () => {
    const queue = uniqueName('trace');
    const rmq = { urls: ['amqp://guest:guest@127.0.0.1:5672'], queue, queueOptions: { durable: false } };
    const consumer = await NestFactory.createMicroservice<MicroserviceOptions>(ShippingModule, {
      transport: Transport.RMQ,
      options: rmq,
      logger: false,
    });
    await consumer.listen();
    const app = await brokerApp({ name: 'BROKER', transport: Transport.RMQ, options: rmq }, (client) => ({
      transports: [new ClientProxyTransport('rmq', client)],
      routes: [{ topic: 'order.shipped', transport: 'rmq' }],
    }));
    try {
      const published = await publishInSpan(app, 'order.shipped');
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
      const seen = await consumed.promise;
      const [attempt] = tracing.named('process order.shipped');
      expect(seen.traceparent).toBe(`00-${published.traceId}-${attempt.spanContext().spanId}-01`);
      expect(seen).toMatchObject({ traceId: published.traceId, parent: attempt.spanContext().spanId });
      const [ship] = tracing.named('ship order');
      expect(parentOf(ship)).toBe(attempt.spanContext().spanId);
      expect(parentOf(attempt)).toBe(published.createSpanId);
    } finally {
      await app.dispose();
      await consumer.close();
    }
  });
});
