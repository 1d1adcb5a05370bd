import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Injectable } from '@nestjs/common';
import { trace, type Attributes } from '@opentelemetry/api';
import { SamplingDecision, type Sampler } from '@opentelemetry/sdk-trace-base';
import { OutboxHandler, WebhookTransport } from '../../../lib';
import { createTestApp, type TestApp } from '../../fixtures/test-app';
import { parentOf, parseTraceparent, registerTracing } from '../../fixtures/tracing';

/**
 * A sampler as production runs one, which drops most traces: here it drops the delivery attempts of
 * the topics named `*.quiet` (by the span's name) and keeps every other span; it notes the attributes
 * it was asked about.
 */
const asked: Array<{ name: string; attributes: Attributes }> = [];
const sampler: Sampler = {
  shouldSample: (_context, _traceId, name, _kind, attributes) => {
    asked.push({ name, attributes });
    const dropped = name.startsWith('process ') && name.endsWith('.quiet');
    return { decision: dropped ? SamplingDecision.NOT_RECORD : SamplingDecision.RECORD_AND_SAMPLED };
  },
  toString: () => 'drops *.quiet attempts',
};
const tracing = registerTracing(sampler);
afterAll(() => tracing.close());
const tracer = trace.getTracer('test-app');

@Injectable()
class Handlers {
  /** For each call: the span it ran in, and the parent of the span it started. */
  calls: Array<{ active: string | undefined; ownParent: string | undefined }> = [];

  @OutboxHandler('order.quiet')
  @OutboxHandler('order.loud')
  handle() {
    const active = trace.getActiveSpan()?.spanContext().spanId;
    const own = tracer.startSpan('charge card');
    own.end();
    const [ended] = tracing.named('charge card').slice(-1);
    this.calls.push({ active, ownParent: parentOf(ended) });
  }
}

describe('tracing under a sampler that drops attempts', () => {
  let app: TestApp;
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });

  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [Handlers],
      outbox: {
        transports: [new WebhookTransport('hooks', { url })],
        routes: [{ topic: 'hook.quiet', transport: 'hooks' }],
      },
    });
  });
  afterAll(async () => {
    await app.dispose();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  beforeEach(() => {
    tracing.exporter.reset();
    asked.length = 0;
  });

  const publishTraced = (topic: string) =>
    tracer.startActiveSpan('job', async (span) => {
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish(topic, { n: 1 }));
      span.end();
      return { id, job: span.spanContext() };
    });

  it('a dropped attempt: the handler runs outside any outbox span, and its own spans make their own decision', async () => {
    const handlers = app.module.get(Handlers);
    handlers.calls.length = 0;
    await publishTraced('order.quiet');
    await publishTraced('order.loud');
    await app.worker.drain();
    expect(tracing.named('process order.quiet')).toEqual([]);
    const [loud] = tracing.named('process order.loud');
    const byTopic = Object.fromEntries(handlers.calls.map((call, i) => [i === 0 ? 'quiet' : 'loud', call]));
    // Delivered in publish order; the sampled one's handler ran in its attempt's span.
    expect(byTopic.quiet).toEqual({ active: undefined, ownParent: undefined });
    expect(byTopic.loud).toEqual({ active: loud.spanContext().spanId, ownParent: loud.spanContext().spanId });
  });

  it('the sampler is asked with the attributes every attempt has; a sampled span has them all', async () => {
    const { id } = await publishTraced('order.loud');
    await app.worker.drain();
    const question = asked.find((a) => a.name === 'process order.loud')!;
    expect(question.attributes).toEqual({
      'messaging.system': 'outbox',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
    });
    const [span] = tracing.named('process order.loud');
    expect(span.attributes).toEqual({
      'messaging.system': 'outbox',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': 'order.loud',
      'messaging.message.id': id,
      'outbox.attempt': 1,
      'outbox.outcome': 'success',
    });
  });

  it("a dropped attempt's transport forwards the publisher's context as it was captured", async () => {
    seen.length = 0;
    const { id } = await publishTraced('hook.quiet');
    await app.worker.drain();
    expect(tracing.named('process hook.quiet')).toEqual([]);
    const [create] = tracing.named('create hook.quiet');
    expect(create.attributes['messaging.message.id']).toBe(id);
    expect(seen).toHaveLength(1);
    expect(parseTraceparent(seen[0].traceparent as string)).toEqual({
      traceId: create.spanContext().traceId,
      spanId: create.spanContext().spanId,
    });
  });
});
