import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Controller, Injectable, Param, Post } from '@nestjs/common';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import {
  OutboxConfigurationError,
  OutboxHandler,
  OutboxModule,
  OutboxNonRetryableError,
  OutboxService,
  WebhookTransport,
  type OutboxMessage,
} from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { parentOf, parseTraceparent, registerTracing } from '../../fixtures/tracing';

const tracing = registerTracing();
afterAll(() => tracing.close());
const tracer = trace.getTracer('test-app');

/** The running test app, for the controller and handlers that publish through its transaction host. */
@Injectable()
class AppRef {
  current!: TestApp;
}

/** What a request publishes, by the path's topic: the request's own span is a SERVER span, as HTTP instrumentation makes. */
@Controller('publish')
class PublishController {
  constructor(private readonly app: AppRef) {}

  @Post(':topic/:n')
  publish(@Param('topic') topic: string, @Param('n') n: string) {
    return tracer.startActiveSpan(`POST /publish/${topic}`, { kind: SpanKind.SERVER }, async (span) => {
      try {
        const { id } = await this.app.current.txHost.withTransaction(() =>
          this.app.current.outbox.publish(topic, { n: Number(n) }),
        );
        return { id, traceId: span.spanContext().traceId, spanId: span.spanContext().spanId };
      } finally {
        span.end();
      }
    });
  }
}

@Injectable()
class Handlers {
  flakyCalls = 0;
  constructor(
    private readonly app: AppRef,
    private readonly outbox: OutboxService,
  ) {}

  /** Does its own traced work, and publishes a follow-up inside it. */
  @OutboxHandler('order.placed')
  async placed(message: OutboxMessage<{ n: number }>) {
    await tracer.startActiveSpan('charge card', async (span) => {
      await this.app.current.txHost.withTransaction(() =>
        this.outbox.publish('order.charged', { n: message.payload.n }),
      );
      span.end();
    });
  }

  /** The span each call ran in, if any. */
  chargedIn: Array<string | undefined> = [];
  @OutboxHandler('order.charged')
  charged() {
    this.chargedIn.push(trace.getActiveSpan()?.spanContext().spanId);
  }

  @OutboxHandler('order.flaky')
  flaky() {
    if (++this.flakyCalls === 1) throw new Error('card service said password=hunter2');
  }

  @OutboxHandler('order.doomed')
  doomed() {
    throw new OutboxNonRetryableError('no such order');
  }
}

/** A webhook receiver: the headers of every request. */
function receiver() {
  const seen: IncomingHttpHeaders[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });
  return {
    seen,
    listen: () =>
      new Promise<string>((resolve) =>
        server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`)),
      ),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A JSON column of an event as stored (a JSON text, or PostgreSQL's jsonb). */
async function jsonOf(app: TestApp, id: string, column: 'headers' | 'trace_context') {
  const value = (await outboxRows(app)).find((r) => r.id === id)![column];
  return (typeof value === 'string' ? JSON.parse(value) : value) as Record<string, string> | null;
}
/** The headers of an event as stored: the publisher's own. */
const headersOf = (app: TestApp, id: string) => jsonOf(app, id, 'headers') as Promise<Record<string, string>>;
/** The trace context stored beside them. */
const traceContextOf = (app: TestApp, id: string) => jsonOf(app, id, 'trace_context');

const processSpans = (topic: string) => tracing.named(`process ${topic}`);
/** The producer span of the publish() that wrote event `id`. */
const createSpan = (topic: string, id: string) => {
  const spans = tracing.named(`create ${topic}`).filter((s) => s.attributes['messaging.message.id'] === id);
  expect(spans).toHaveLength(1);
  return spans[0];
};
const idOf = (span: ReadableSpan) => span.spanContext().spanId;
const attrs = (span: ReadableSpan) => span.attributes;

describe.each(backends())('tracing on %s', (backend: BackendName) => {
  let app: TestApp;
  let handlers: Handlers;
  const hook = receiver();

  beforeAll(async () => {
    const url = await hook.listen();
    app = await createTestApp({
      backend,
      providers: [AppRef, Handlers],
      controllers: [PublishController],
      outbox: {
        retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 },
        transports: [new WebhookTransport('hooks', { url })],
        routes: [{ topic: 'order.shipped', transport: 'hooks' }],
      },
    });
    app.module.get(AppRef).current = app;
    handlers = app.module.get(Handlers);
  });
  afterAll(async () => {
    await app.dispose();
    await hook.close();
  });
  beforeEach(() => tracing.exporter.reset());

  const storedHeaders = (id: string) => headersOf(app, id);
  const storedContext = async (id: string) => (await traceContextOf(app, id)) ?? {};
  const request = async (topic: string, n = 1) => {
    const response = await fetch(`${app.url}/publish/${topic}/${n}`, { method: 'POST' });
    expect(response.status).toBe(201);
    return (await response.json()) as { id: string; traceId: string; spanId: string };
  };

  it("a request's span → publish()'s span → the attempt's span → the handler's spans and what it publishes, one trace", async () => {
    const published = await request('order.placed');
    // publish() is a producer span, the request's child.
    const create = createSpan('order.placed', published.id);
    expect(create.spanContext().traceId).toBe(published.traceId);
    expect(parentOf(create)).toBe(published.spanId);
    expect(create.kind).toBe(SpanKind.PRODUCER);
    expect(attrs(create)).toEqual({
      'messaging.system': 'outbox',
      'messaging.operation.type': 'create',
      'messaging.operation.name': 'create',
      'messaging.destination.name': 'order.placed',
      'messaging.message.id': published.id,
    });
    expect(create.status.code).toBe(SpanStatusCode.UNSET);
    // Its context is captured, beside the event's headers (guarantee 17: not in them).
    expect(parseTraceparent((await storedContext(published.id)).traceparent)).toEqual({
      traceId: published.traceId,
      spanId: idOf(create),
    });
    expect(await storedHeaders(published.id)).toEqual({});
    await app.worker.drain();

    const [attempt] = processSpans('order.placed');
    expect(attempt.spanContext().traceId).toBe(published.traceId);
    expect(parentOf(attempt)).toBe(idOf(create));
    expect(attempt.kind).toBe(SpanKind.CONSUMER);
    expect(attrs(attempt)).toEqual({
      'messaging.system': 'outbox',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': 'order.placed',
      'messaging.message.id': published.id,
      'outbox.attempt': 1,
      'outbox.outcome': 'success',
    });
    expect(attempt.status.code).toBe(SpanStatusCode.UNSET);
    expect(attempt.instrumentationScope.name).toBe('nestjs-typeorm-outbox');

    const [charge] = tracing.named('charge card');
    expect(charge.spanContext().traceId).toBe(published.traceId);
    expect(parentOf(charge)).toBe(attempt.spanContext().spanId);
    // Published inside the handler's span: its delivery continues from there.
    const [followUp] = processSpans('order.charged');
    expect(followUp.spanContext().traceId).toBe(published.traceId);
    const followUpCreate = tracing.named('create order.charged')[0];
    expect(parentOf(followUpCreate)).toBe(charge.spanContext().spanId);
    expect(parentOf(followUp)).toBe(idOf(followUpCreate));
  });

  it("two requests publishing at once: each event in its own request's trace", async () => {
    const [a, b] = await Promise.all([request('order.charged', 1), request('order.charged', 2)]);
    expect(a.traceId).not.toBe(b.traceId);
    await app.worker.drain();
    const byId = new Map(processSpans('order.charged').map((s) => [attrs(s)['messaging.message.id'], s]));
    for (const r of [a, b]) {
      expect(byId.get(r.id)!.spanContext().traceId).toBe(r.traceId);
      const create = createSpan('order.charged', r.id);
      expect(parentOf(create)).toBe(r.spanId);
      expect(parentOf(byId.get(r.id)!)).toBe(idOf(create));
    }
  });

  it('a retried event: one span per attempt, the failure recorded (redacted) on the first', async () => {
    handlers.flakyCalls = 0;
    const published = await request('order.flaky');
    await app.worker.drain();
    await app.worker.drain();
    const spans = processSpans('order.flaky').sort(
      (x, y) => Number(attrs(x)['outbox.attempt']) - Number(attrs(y)['outbox.attempt']),
    );
    expect(spans.map((s) => [attrs(s)['outbox.attempt'], attrs(s)['outbox.outcome']])).toEqual([
      [1, 'retried'],
      [2, 'success'],
    ]);
    const create = createSpan('order.flaky', published.id);
    for (const span of spans) {
      expect(span.spanContext().traceId).toBe(published.traceId);
      expect(parentOf(span)).toBe(idOf(create));
    }
    const [failed, succeeded] = spans;
    expect(failed.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'Error: card service said password=[redacted]',
    });
    expect(attrs(failed)['error.type']).toBe('Error');
    expect(failed.events).toHaveLength(1);
    expect(failed.events[0].name).toBe('exception');
    expect(failed.events[0].attributes).toMatchObject({
      'exception.type': 'Error',
      'exception.message': 'Error: card service said password=[redacted]',
      'outbox.target': 'Handlers.flaky',
    });
    expect(String(failed.events[0].attributes!['exception.stacktrace'])).toContain('password=[redacted]');
    expect(JSON.stringify(failed.events)).not.toContain('hunter2');
    expect(succeeded.status.code).toBe(SpanStatusCode.UNSET);
    expect(succeeded.events).toEqual([]);
  });

  it('a dead-lettered event: its span says so, with the error', async () => {
    await request('order.doomed');
    await app.worker.drain();
    const [span] = processSpans('order.doomed');
    expect(attrs(span)).toMatchObject({ 'outbox.outcome': 'dead-lettered', 'error.type': 'OutboxNonRetryableError' });
    expect(span.status).toEqual({ code: SpanStatusCode.ERROR, message: 'OutboxNonRetryableError: no such order' });
  });

  it("a webhook receiver gets the attempt's span as its traceparent", async () => {
    hook.seen.length = 0;
    const published = await request('order.shipped');
    await app.worker.drain();
    const [attempt] = processSpans('order.shipped');
    expect(hook.seen).toHaveLength(1);
    expect(parseTraceparent(hook.seen[0].traceparent as string)).toEqual({
      traceId: published.traceId,
      spanId: attempt.spanContext().spanId,
    });
    // The event's trace context, as stored, still is the publish's; its headers were never given one.
    expect(parseTraceparent((await storedContext(published.id)).traceparent).spanId).toBe(
      idOf(createSpan('order.shipped', published.id)),
    );
    expect(await storedHeaders(published.id)).toEqual({});
  });

  it("outside any trace: publish()'s span starts the trace, and the attempt continues it", async () => {
    const { id } = await app.txHost.withTransaction(() =>
      app.outbox.publish('order.charged', { n: 3 }, { headers: { a: 'b' } }),
    );
    const create = createSpan('order.charged', id);
    expect(parentOf(create)).toBeUndefined();
    expect(await storedHeaders(id)).toEqual({ a: 'b' });
    expect(parseTraceparent((await storedContext(id)).traceparent).spanId).toBe(idOf(create));
    await app.worker.drain();
    const [span] = processSpans('order.charged');
    expect(parentOf(span)).toBe(idOf(create));
  });

  it('a publish that fails: its span says why, redacted', async () => {
    await expect(
      app.txHost.withTransaction(() =>
        app.outbox.publish('order.charged', { n: 1 }, { headers: { 'password=hunter2': 'x'.repeat(10) } }),
      ),
    ).rejects.toThrow();
    const [create] = tracing.named('create order.charged');
    expect(create.status.code).toBe(SpanStatusCode.ERROR);
    expect(attrs(create)['error.type']).toMatch(/Error$/);
    expect(create.events.map((e) => e.name)).toEqual(['exception']);
    expect(JSON.stringify(create.events)).not.toContain('hunter2');
  });

  // The headers no longer hold the caller's context (guarantee 17): a traceparent the caller set is its data, kept
  // as given, and the context is stored beside the headers of every event alike.
  it("publishMany: every event carries the caller's context; one that set its own traceparent keeps it in its headers", async () => {
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const { ids, context } = await tracer.startActiveSpan('job', async (span) => {
      const results = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'order.charged', payload: { n: 4 } },
          { topic: 'order.charged', payload: { n: 5 }, headers: { traceparent: own } },
          { topic: 'order.charged', payload: { n: 6 }, headers: { a: 'b' } },
        ]),
      );
      span.end();
      return { ids: results.map((r) => r.id), context: span.spanContext() };
    });
    // One span for the call, the batch's size on it.
    const [create] = tracing.named('create order.charged');
    expect(parentOf(create)).toBe(context.spanId);
    expect(attrs(create)).toMatchObject({ 'messaging.batch.message_count': 3 });
    expect(attrs(create)).not.toHaveProperty('messaging.message.id');
    const contexts = await Promise.all(ids.map((id) => storedContext(id)));
    for (const stored of contexts) {
      expect(parseTraceparent(stored.traceparent)).toEqual({ traceId: context.traceId, spanId: idOf(create) });
    }
    expect(await Promise.all(ids.map((id) => storedHeaders(id)))).toEqual([{}, { traceparent: own }, { a: 'b' }]);
  });
});

describe('the tracing option', () => {
  beforeEach(() => tracing.exporter.reset());

  it('link: the attempt starts a trace of its own, linked to the publishing span', async () => {
    const app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [AppRef, Handlers],
      outbox: { tracing: { link: true } },
    });
    try {
      const published = await tracer.startActiveSpan('job', async (span) => {
        await app.txHost.withTransaction(() => app.outbox.publish('order.charged', { n: 1 }));
        span.end();
        return span.spanContext();
      });
      await app.worker.drain();
      const [attempt] = processSpans('order.charged');
      expect(parentOf(attempt)).toBeUndefined();
      expect(attempt.spanContext().traceId).not.toBe(published.traceId);
      const [create] = tracing.named('create order.charged');
      expect(parentOf(create)).toBe(published.spanId);
      expect(attempt.links.map((l) => l.context)).toEqual([
        expect.objectContaining({ traceId: published.traceId, spanId: idOf(create) }),
      ]);
    } finally {
      await app.dispose();
    }
  });

  it("publishSpans: false: no span at publish(); the attempt continues the caller's span, a publishMany of several topics likewise", async () => {
    const app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [AppRef, Handlers],
      outbox: { tracing: { publishSpans: false } },
    });
    try {
      const published = await tracer.startActiveSpan('job', async (span) => {
        await app.txHost.withTransaction(() =>
          app.outbox.publishMany([
            { topic: 'order.charged', payload: { n: 1 } },
            { topic: 'order.doomed', payload: {} },
          ]),
        );
        span.end();
        return span.spanContext();
      });
      await app.worker.drain();
      expect(tracing.spans().filter((s) => s.name.startsWith('create'))).toEqual([]);
      for (const attempt of [...processSpans('order.charged'), ...processSpans('order.doomed')]) {
        expect(parentOf(attempt)).toBe(published.spanId);
      }
      expect(processSpans('order.doomed')).toHaveLength(1);
    } finally {
      await app.dispose();
    }
  });

  it('a publishMany of several topics: one span, `create`, no destination', async () => {
    const app = await createTestApp({ backend: 'better-sqlite3', providers: [AppRef, Handlers] });
    try {
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'order.charged', payload: { n: 1 } },
          { topic: 'order.doomed', payload: {} },
        ]),
      );
      const [create] = tracing.named('create');
      expect(attrs(create)).toEqual({
        'messaging.system': 'outbox',
        'messaging.operation.type': 'create',
        'messaging.operation.name': 'create',
        'messaging.batch.message_count': 2,
      });
    } finally {
      await app.dispose();
    }
  });

  it('with the API but no tracer provider registered: no span; one registered later is used from then on', async () => {
    const app = await createTestApp({ backend: 'better-sqlite3', providers: [AppRef, Handlers] });
    const handlers = app.module.get(Handlers);
    trace.disable();
    try {
      await app.txHost.withTransaction(() => app.outbox.publish('order.charged', { n: 1 }));
      await app.worker.drain();
      expect(handlers.chargedIn).toEqual([undefined]);
      expect(tracing.spans()).toEqual([]);

      trace.setGlobalTracerProvider(tracing.provider);
      await app.txHost.withTransaction(() => app.outbox.publish('order.charged', { n: 2 }));
      await app.worker.drain();
      const [span] = processSpans('order.charged');
      expect(handlers.chargedIn).toEqual([undefined, span.spanContext().spanId]);
    } finally {
      trace.setGlobalTracerProvider(tracing.provider);
      await app.dispose();
    }
  });

  it('false: nothing captured, no span', async () => {
    const app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [AppRef, Handlers],
      outbox: { tracing: false },
    });
    try {
      const id = await tracer.startActiveSpan('job', async (span) => {
        const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.charged', { n: 1 }));
        span.end();
        return id;
      });
      await app.worker.drain();
      expect(await headersOf(app, id)).toEqual({});
      expect(await traceContextOf(app, id)).toBeNull();
      expect(processSpans('order.charged')).toEqual([]);
      expect(tracing.spans().map((s) => s.name)).toEqual(['job']);
    } finally {
      await app.dispose();
    }
  });

  it('refuses what it does not know, with a typed error', () => {
    expect(() => OutboxModule.forRoot({ tracing: 'on' as never })).toThrow(OutboxConfigurationError);
    expect(() => OutboxModule.forRoot({ tracing: { parent: true } as never })).toThrow(/tracing/);
    expect(() => OutboxModule.forRoot({ tracing: { link: 'yes' } as never })).toThrow(/tracing\.link/);
    expect(() => OutboxModule.forRoot({ tracing: { publishSpans: 1 } as never })).toThrow(/tracing\.publishSpans/);
  });
});
