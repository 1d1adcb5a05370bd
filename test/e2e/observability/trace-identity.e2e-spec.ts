import { Injectable } from '@nestjs/common';
import {
  context,
  propagation,
  trace,
  type Context,
  type TextMapPropagator,
  type TextMapSetter,
} from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OutboxHandler, OutboxHeadersTooLargeError, type OutboxMessage, type PublishOptions } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { parentOf, parseTraceparent, registerTracing } from '../../fixtures/tracing';

/*
 * Guarantee 17 and RELIABILITY case 39: trace context travels with an event but is not part of it.
 * The same publishes on an app with tracing (the real SDK registered) and one with `tracing: false`.
 */

const tracing = registerTracing();
afterAll(() => tracing.close());
const tracer = trace.getTracer('test-app');

/** What every handler call was given, and the baggage active in it. */
@Injectable()
class Seen {
  headers: Array<Record<string, string>> = [];
  baggage: Array<Record<string, string>> = [];
  @OutboxHandler('order.placed')
  placed(message: OutboxMessage) {
    this.headers.push({ ...message.headers });
    const entries = propagation.getActiveBaggage()?.getAllEntries() ?? [];
    this.baggage.push(Object.fromEntries(entries.map(([name, entry]) => [name, entry.value])));
  }
}

/** Runs `fn` in a request's span of its own (a new trace) with `baggage` active. */
function inRequest<T>(baggage: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  return tracer.startActiveSpan('POST /orders', async (span) => {
    const entries = Object.fromEntries(Object.entries(baggage).map(([name, value]) => [name, { value }]));
    try {
      return await context.with(propagation.setBaggage(context.active(), propagation.createBaggage(entries)), fn);
    } finally {
      span.end();
    }
  });
}

const publishIn = (app: TestApp, baggage: Record<string, string>, options: PublishOptions = {}, n = 1) =>
  inRequest(baggage, () => app.txHost.withTransaction(() => app.outbox.publish('order.placed', { n }, options)));

/** A JSON column of each row as stored (a JSON text, or PostgreSQL's jsonb). */
async function stored(app: TestApp, column: 'headers' | 'trace_context') {
  return (await outboxRows(app)).map(
    (row) => (typeof row[column] === 'string' ? JSON.parse(row[column]) : row[column]) as Record<string, string> | null,
  );
}

/** Headers whose JSON is exactly `bytes` long: five headers, four of 4,000 characters (a header's limit is 4,096). */
function headersOfSize(bytes: number): Record<string, string> {
  const headers: Record<string, string> = {};
  for (let i = 0; i < 4; i++) headers[`h${i}`] = 'x'.repeat(4000);
  headers.h4 = 'x'.repeat(bytes - JSON.stringify({ ...headers, h4: '' }).length);
  return headers;
}

/** A baggage propagator without W3C's limits, as an application may register one: it writes every entry. */
class UnboundedBaggagePropagator implements TextMapPropagator {
  inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void {
    const entries = propagation.getBaggage(ctx)?.getAllEntries() ?? [];
    if (entries.length === 0) return;
    setter.set(carrier, 'baggage', entries.map(([name, e]) => `${name}=${encodeURIComponent(e.value)}`).join(','));
  }
  extract(ctx: Context): Context {
    return ctx;
  }
  fields(): string[] {
    return ['baggage'];
  }
}

function usePropagators(...propagators: TextMapPropagator[]) {
  propagation.disable();
  propagation.setGlobalPropagator(new CompositePropagator({ propagators }));
}

describe.each(backends())('trace context is not part of an event on %s', (backend: BackendName) => {
  let on: TestApp;
  let off: TestApp;

  beforeAll(async () => {
    // Tracing on last: Nest's static Logger, which the tracing warning goes through, writes to the app built last.
    off = await createTestApp({ backend, providers: [Seen], outbox: { tracing: false } });
    on = await createTestApp({ backend, providers: [Seen] });
  });
  afterAll(async () => {
    await on?.dispose();
    await off?.dispose();
  });
  beforeEach(async () => {
    for (const app of [on, off]) {
      await app.dataSource.query(app.sql(`DELETE FROM "${app.table}"`));
      Object.assign(app.module.get(Seen), { headers: [], baggage: [] });
    }
    on.logger.lines.length = 0;
  });

  it('an event with no stored context whose headers carry one (published by a version before schema version 8): its attempt continues it', async () => {
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await on.txHost.withTransaction(() =>
      on.outbox.publish('order.placed', { n: 1 }, { headers: { traceparent: own } }),
    );
    // As that version left it: the context in the headers, none beside them.
    await on.dataSource.query(on.sql(`UPDATE "${on.table}" SET "trace_context" = NULL`));
    expect(await stored(on, 'trace_context')).toEqual([null]);
    tracing.exporter.reset();
    expect(await on.worker.drain()).toMatchObject({ delivered: 1 });
    const [span] = tracing.named('process order.placed');
    expect(span.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(parentOf(span)).toBe('b7ad6b7169203331');
    expect(on.module.get(Seen).headers).toEqual([{ traceparent: own }]);
  });

  // RELIABILITY case 39: a client's retry, or a handler's follow-up on its next attempt, runs in another trace.
  it('the same dedupe key published again from another trace, with other baggage: inserted: false, one row', async () => {
    const options = { dedupeKey: 'order-1', headers: { a: 'b' } };
    const first = await publishIn(on, { tenant: 'a' }, options);
    const again = await publishIn(on, { tenant: 'a', retry: '1' }, options);
    expect(first.inserted).toBe(true);
    expect(again).toEqual({ id: first.id, inserted: false });
    expect(await outboxRows(on)).toHaveLength(1);
    // The first publish's context is kept, as the rest of the event.
    const [traceContext] = await stored(on, 'trace_context');
    expect(traceContext).toMatchObject({ baggage: 'tenant=a' });
    expect(parseTraceparent(traceContext!.traceparent).traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  it('the same with tracing off: inserted: false, one row, no trace context stored', async () => {
    const options = { dedupeKey: 'order-1', headers: { a: 'b' } };
    const first = await publishIn(off, { tenant: 'a' }, options);
    const again = await publishIn(off, { tenant: 'a', retry: '1' }, options);
    expect(again).toEqual({ id: first.id, inserted: false });
    expect(await outboxRows(off)).toHaveLength(1);
    expect(await stored(off, 'trace_context')).toEqual([null]);
  });

  it("a handler's message.headers are what was published, the same with tracing on and off", async () => {
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const published: Array<Record<string, string>> = [{ a: 'b' }, { traceparent: own, a: 'c' }, {}];
    for (const app of [on, off]) {
      for (const [i, headers] of published.entries()) await publishIn(app, { tenant: 'a' }, { headers }, i);
      expect(await app.worker.drain()).toMatchObject({ delivered: 3, failed: 0 });
    }
    const seenOn = on.module.get(Seen).headers;
    expect(seenOn).toEqual(off.module.get(Seen).headers);
    expect([...seenOn].sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)))).toEqual([
      { a: 'b' },
      { a: 'c', traceparent: own },
      {},
    ]);
    // The context still reached the handler with tracing on: the publisher's baggage is active in it.
    expect(on.module.get(Seen).baggage).toEqual([{ tenant: 'a' }, { tenant: 'a' }, { tenant: 'a' }]);
  });

  it("the headers' size limit is the publisher's own: trace context takes none of it", async () => {
    const baggage = { session: 'v'.repeat(2000) };
    for (const app of [on, off]) {
      await expect(publishIn(app, baggage, { headers: headersOfSize(16 * 1024) })).resolves.toMatchObject({
        inserted: true,
      });
      await expect(publishIn(app, baggage, { headers: headersOfSize(16 * 1024 + 1) })).rejects.toThrow(
        OutboxHeadersTooLargeError,
      );
    }
    expect((await stored(on, 'trace_context'))[0]).toMatchObject({ baggage: `session=${baggage.session}` });
  });

  it('valid W3C baggage over 4,096 characters: published and delivered whole, nothing to warn about', async () => {
    const baggage = { a: 'x'.repeat(2000), b: 'y'.repeat(2000), c: 'z'.repeat(2000) };
    const { inserted } = await publishIn(on, baggage);
    expect(inserted).toBe(true);
    const [traceContext] = await stored(on, 'trace_context');
    expect(traceContext!.baggage.length).toBeGreaterThan(6000);
    expect(await on.worker.drain()).toMatchObject({ delivered: 1, failed: 0 });
    expect(on.module.get(Seen).baggage).toEqual([baggage]);
    expect(on.logger.lines.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('a trace context that does not fit: published with the entries that fit, delivered, one warning for all', async () => {
    usePropagators(new W3CTraceContextPropagator(), new UnboundedBaggagePropagator());
    try {
      const baggage = Object.fromEntries(['a', 'b', 'c', 'd', 'e'].map((name) => [name, name.repeat(3000)]));
      for (let n = 0; n < 3; n++)
        await expect(publishIn(on, baggage, {}, n)).resolves.toMatchObject({ inserted: true });
      for (const traceContext of await stored(on, 'trace_context')) {
        // Cut between entries, to W3C Baggage's limit of 8,192.
        expect(traceContext!.baggage).toBe(`a=${'a'.repeat(3000)},b=${'b'.repeat(3000)}`);
        expect(parseTraceparent(traceContext!.traceparent).traceId).toMatch(/^[0-9a-f]{32}$/);
      }
      expect(await on.worker.drain()).toMatchObject({ delivered: 3, failed: 0 });
      const warnings = on.logger.lines.filter((l) => l.level === 'warn');
      expect(warnings).toEqual([
        expect.objectContaining({
          context: 'OutboxTracing',
          message: expect.stringContaining('baggage cut to 2 of its 5 entries') as string,
        }),
      ]);
    } finally {
      usePropagators(new W3CTraceContextPropagator(), new W3CBaggagePropagator());
    }
  });
});
