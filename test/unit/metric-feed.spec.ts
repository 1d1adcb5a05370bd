import { Logger, type LoggerService } from '@nestjs/common';
import { Counter, Registry } from 'prom-client';
import type { OutboxLifecycleEventInput } from '../../lib/events/outbox-events';
import type { OutboxStats } from '../../lib/interfaces/outbox-operations.interface';
import { byLabels, cachedStats, meterOf, type MetricSink } from '../../lib/observability/metric-feed';
import { Tally } from '../../lib/observability/prometheus-metrics';
import { ErrorText } from '../../lib/utils/error-text';

describe('byLabels', () => {
  it('builds each label set once, and past its cap starts again, handing over what it held', () => {
    const made: string[] = [];
    const dropped: string[][] = [];
    const memo = byLabels(
      (topic, outcome, target) => made[made.push(`${topic}/${outcome}/${target}`) - 1],
      (values) => dropped.push(values),
      5,
    );
    expect([
      memo('a', 'x'),
      memo('a', 'x'),
      memo('b'),
      memo('a', 'y'),
      memo('a', 'x', 'T'),
      memo('a', 'x', 'T'),
    ]).toEqual(['a/x/undefined', 'a/x/undefined', 'b/undefined/undefined', 'a/y/undefined', 'a/x/T', 'a/x/T']);
    expect(memo('a', 'x', 'U')).toBe('a/x/U');
    expect(dropped).toEqual([]);
    for (let n = 0; n < 16; n++) memo(`t${n}`, 'x', 'T');
    const held = made.length - dropped.flat().length;
    expect({ held, dropped: dropped.map((values) => values.length) }).toEqual({ held: 1, dropped: [5, 5, 5, 5] });
    // A label set dropped is built again when it comes back.
    expect(memo('a', 'x', 'T')).toBe('a/x/T');
    expect(made.filter((value) => value === 'a/x/T')).toHaveLength(2);
  });
});

describe('Tally', () => {
  it('keeps at most its cap of counts however many topics come, and counts every event of each', async () => {
    const registry = new Registry();
    const counter = new Counter({
      name: 'deliveries',
      help: 'test',
      labelNames: ['topic', 'outcome'],
      registers: [registry],
    });
    const tally = new Tally();
    const count = tally.of(counter, 4);
    const topics = Array.from({ length: 25 }, (_, n) => `topic.${n}`);
    let largest = 0;
    // Round after round over every topic: each comes back after the memo has started again.
    for (let round = 0; round < 3; round++) {
      for (const [n, topic] of topics.entries()) {
        for (let i = 0; i <= n % 3; i++) count(topic, 'delivered').n++;
        count(topic, 'dead').n++;
        largest = Math.max(largest, tally.size);
      }
    }
    expect(largest).toBe(4);
    tally.flush();
    const counted = (await counter.get()).values.map((v) => [v.labels.topic, v.labels.outcome, v.value]);
    const expected = topics.flatMap((topic, n) => [
      [topic, 'delivered', 3 * ((n % 3) + 1)],
      [topic, 'dead', 3],
    ]);
    expect(counted.sort()).toEqual(expected.sort());
  });

  /** A counter's child that says what it was given. */
  const child = () => ({ inc: jest.fn<void, [number?]>() });

  it('adds each count once, at the flush after it, and nothing for a count that did not move', () => {
    const tally = new Tally();
    const unlabelled = child();
    const lost = tally.add(unlabelled);
    const idle = child();
    tally.add(idle);
    lost.n += 2;
    tally.flush();
    tally.flush();
    lost.n += 3;
    tally.flush();
    expect(unlabelled.inc.mock.calls).toEqual([[2], [3]]);
    expect(idle.inc).not.toHaveBeenCalled();
    expect(tally.size).toBe(2);
  });

  it("keeps a topic's counts until the flush: one child per label set, given the sum once", () => {
    const children = new Map<string, ReturnType<typeof child>>();
    const counter = Object.assign(child(), {
      labels: (values: Record<string, string>) => {
        const key = JSON.stringify(values);
        if (!children.has(key)) children.set(key, child());
        return children.get(key)!;
      },
    });
    const tally = new Tally();
    const count = tally.of(counter);
    count('a', 'delivered').n++;
    count('a', 'delivered').n++;
    count('a', 'dead').n++;
    count('a', 'dead', 'H.h').n++;
    count('b').n++;
    expect([...children.keys()]).toEqual([
      '{"topic":"a","outcome":"delivered"}',
      '{"topic":"a","outcome":"dead"}',
      '{"topic":"a","target":"H.h","outcome":"dead"}',
      '{"topic":"b"}',
    ]);
    expect([...children.values()].map((c) => c.inc.mock.calls)).toEqual([[], [], [], []]);
    tally.flush();
    expect([...children.values()].map((c) => c.inc.mock.calls)).toEqual([[[2]], [[1]], [[1]], [[1]]]);
  });
});

describe('meterOf', () => {
  it('turns each lifecycle event into its measure, and the others into none', () => {
    const measured: unknown[][] = [];
    const sink: MetricSink = {
      published: (...args) => measured.push(['published', ...args]),
      deliveryEnded: (...args) => measured.push(['deliveryEnded', ...args]),
      handlerRan: (...args) => measured.push(['handlerRan', ...args]),
      claimed: (...args) => measured.push(['claimed', ...args]),
      leasesLost: (...args) => measured.push(['leasesLost', ...args]),
    };
    const meter = meterOf(sink);
    const run = { id: 'e1', topic: 't', handler: 'H.h', attempt: 1, durationMs: 250 };
    const failed = (failedHandlers: string[]) => ({ error: 'E', failedHandlers });
    const events: OutboxLifecycleEventInput[] = [
      { type: 'published', ids: ['e1', 'e2', 'e3'], topics: ['t', 'u', 't'] },
      { type: 'claimed', token: 'k', count: 2, ids: ['e1', 'e2'], durationMs: 4 },
      { type: 'handler.succeeded', ...run },
      { type: 'handler.failed', ...run, durationMs: 1500, error: 'E' },
      { type: 'delivered', id: 'e1', topic: 't', attempt: 1 },
      { type: 'retry.scheduled', id: 'e2', topic: 'u', attempt: 1, delayMs: 10, dueAt: new Date(), ...failed(['H.h']) },
      { type: 'retry.scheduled', id: 'e4', topic: 'v', attempt: 1, delayMs: 10, dueAt: new Date(), ...failed([]) },
      { type: 'dead-lettered', id: 'e3', topic: 't', attempt: 3, reason: 'handler', ...failed(['H.h', 'transport:q']) },
      { type: 'dead-lettered', id: 'e5', topic: 't', attempt: 3, reason: 'undecodable', ...failed([]) },
      { type: 'lease.lost', ids: ['e1', 'e2'], count: 2, what: 'acknowledge' },
      { type: 'released', ids: ['e1'], uncounted: true, why: 'shutdown' },
      { type: 'key.blocked', key: 'k', id: 'e3', topic: 't' },
      { type: 'key.unblocked', key: 'k', id: 'e3', how: 'discard' },
      { type: 'worker.started' },
      { type: 'worker.stopped', timedOut: false },
      { type: 'wake-up.lost', side: 'listen', error: 'E' },
      { type: 'wake-up.restored', side: 'listen' },
    ];
    for (const event of events) meter(event);
    expect(measured).toEqual([
      ['published', 't'],
      ['published', 'u'],
      ['published', 't'],
      ['claimed', 0.004],
      // A target counts as delivered when it returns; the event's own `delivered` adds nothing.
      ['deliveryEnded', 't', 'H.h', 'delivered'],
      ['handlerRan', 't', 'H.h', 'success', 0.25],
      ['handlerRan', 't', 'H.h', 'failure', 1.5],
      // A failed target counts with what its attempt's failure made of the event; none ran: target "none".
      ['deliveryEnded', 'u', 'H.h', 'retried'],
      ['deliveryEnded', 'v', 'none', 'retried'],
      ['deliveryEnded', 't', 'H.h', 'dead'],
      ['deliveryEnded', 't', 'transport:q', 'dead'],
      ['deliveryEnded', 't', 'none', 'dead'],
      ['leasesLost', 2],
    ]);
  });
});

describe('cachedStats', () => {
  const figures = { due: 1 } as OutboxStats;
  const metrics = (statsCacheMs: number) => ({ prometheus: undefined, openTelemetry: undefined, statsCacheMs });
  const warnings: unknown[] = [];
  const logger: LoggerService = { log: () => undefined, error: () => undefined, warn: (m) => warnings.push(m) };
  beforeAll(() => {
    Logger.overrideLogger(logger);
  });
  afterAll(() => {
    Logger.overrideLogger(['log', 'error', 'warn']);
  });
  beforeEach(() => {
    warnings.length = 0;
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('reads the table once for every scrape within statsCacheMs, and again after it', async () => {
    const stats = jest.fn(() => Promise.resolve(figures));
    const read = cachedStats({ stats }, { metrics: metrics(5000), errorText: new ErrorText() });
    expect(await Promise.all([read(), read(), read()])).toEqual([figures, figures, figures]);
    jest.advanceTimersByTime(4999);
    await read();
    expect(stats).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(1);
    await read();
    expect(stats).toHaveBeenCalledTimes(2);
  });

  it('keeps no failed read: undefined, a warning written by the error text, and the next scrape reads again', async () => {
    const stats = jest
      .fn<Promise<OutboxStats>, []>()
      .mockRejectedValueOnce(new Error('no route to postgres://app:pg-s3cret@db for acme-internal-42'))
      .mockResolvedValue(figures);
    const errorText = new ErrorText((text) => text.replaceAll('acme-internal-42', '<tenant>'));
    const read = cachedStats({ stats }, { metrics: metrics(5000), errorText });
    expect(await read()).toBeUndefined();
    expect(warnings).toEqual([
      "Outbox metrics: the table's state could not be read: Error: no route to postgres://[redacted]@db for <tenant>",
    ]);
    expect(await read()).toBe(figures);
    expect(stats).toHaveBeenCalledTimes(2);
  });
});
