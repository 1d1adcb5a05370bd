/**
 * Per-target bounds (issue 38's proof): a slow handler beside fast targets, at a steady rate. Topic
 * `bounds.a` has the slow handler (when the variant has one), a fast handler and a webhook route;
 * `bounds.b` a fast handler and the same route. Events are published at `BOUNDS.rate` per second, the
 * two topics in turn, for `BOUNDS.seconds`; the worker runs in another process (child.ts, mode
 * `lib-bounds`), as in production. Measured: commit → each fast target (the fast handlers, and the
 * webhook's arrival at this process's HTTP server), and the most calls of the slow handler at once.
 */
import { Injectable } from '@nestjs/common';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { OutboxHandler, OutboxService, WebhookTransport, type OutboxModuleOptions, type OutboxMessage } from '../lib';
import { percentile } from './env';

export const BOUNDS = {
  seconds: Number(process.env.OUTBOX_BENCH_BOUNDS_SECONDS ?? 30),
  rate: 20,
  slowMs: 5_000,
};

/** Without the slow handler; with it at the default bound (`worker.targetConcurrency`); with `{ concurrency: 2 }`. */
export type BoundsVariant = 'none' | 'default' | 'two';

/** Reports each fast call and each start and end of a slow one (child.ts prints them). */
@Injectable()
export class BoundsProbe {
  onFast: (id: string, target: string) => void = () => undefined;
  running = 0;
  maxRunning = 0;
  calls = 0;
  async slow() {
    this.calls++;
    this.maxRunning = Math.max(this.maxRunning, ++this.running);
    await new Promise((resolve) => setTimeout(resolve, BOUNDS.slowMs));
    this.running--;
  }
}

@Injectable()
export class BoundsFast {
  constructor(private readonly probe: BoundsProbe) {}
  @OutboxHandler('bounds.a')
  a(message: OutboxMessage) {
    this.probe.onFast(message.id, 'fast-a');
  }
  @OutboxHandler('bounds.b')
  b(message: OutboxMessage) {
    this.probe.onFast(message.id, 'fast-b');
  }
}

@Injectable()
export class BoundsSlowDefault {
  constructor(private readonly probe: BoundsProbe) {}
  @OutboxHandler('bounds.a', { name: 'slow' })
  slow() {
    return this.probe.slow();
  }
}

@Injectable()
export class BoundsSlowTwo {
  constructor(private readonly probe: BoundsProbe) {}
  @OutboxHandler('bounds.a', { name: 'slow', concurrency: 2 })
  slow() {
    return this.probe.slow();
  }
}

/** The providers and module options of the worker's app for `variant`, its webhook posting to `url`. */
export function boundsApp(variant: BoundsVariant, url: string) {
  const slow = variant === 'default' ? [BoundsSlowDefault] : variant === 'two' ? [BoundsSlowTwo] : [];
  const options: Omit<OutboxModuleOptions, 'tableName'> = {
    // Slow calls still running at the end are not waited for long: the run is measured by then.
    worker: { enabled: true, shutdownTimeoutMs: 1000 },
    transports: [new WebhookTransport('hooks', { url })],
    routes: [{ topic: 'bounds.#', transport: 'hooks' }],
  };
  return { providers: [BoundsProbe, BoundsFast, ...slow], options };
}

export interface BoundsChild {
  ready: Promise<void>;
  onLine(listener: (line: string) => void): void;
  go(): void;
  exited: Promise<void>;
}

export interface BoundsResult {
  variant: BoundsVariant;
  events: number;
  ratePerSecond: number;
  /** Fast deliveries expected (two per event: its topic's fast handler and the webhook) and received. */
  expected: number;
  received: number;
  p50: number;
  p95: number;
  p99: number;
  /** The slow handler: its bound, its calls started during the run, and the most at once. */
  slowBound: number | null;
  slowCalls: number;
  slowMaxRunning: number;
}

/**
 * One run on a fresh table: a worker process started by `spawn(url)` (which must print
 * `F <id> <target> <ms>` per fast call, then `M <max running> <calls>` and exit on "go"), and the events
 * published through `publisher`.
 */
export async function boundsRun(
  variant: BoundsVariant,
  spawn: (url: string) => BoundsChild,
  publisher: { tx: TransactionHost<TransactionalAdapterTypeOrm>; outbox: OutboxService },
  defaultBound: number,
): Promise<BoundsResult> {
  const arrivals: Array<[id: string, at: number]> = [];
  const server = createServer((req, res) => {
    arrivals.push([String(req.headers['idempotency-key']), Date.now()]);
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  const worker = spawn(url);
  const fast: Array<[id: string, at: number]> = [];
  let slow = { max: 0, calls: 0 };
  worker.onLine((line) => {
    const [tag, a, b, c] = line.split(' ');
    if (tag === 'F') fast.push([a, Number(c)]);
    else if (tag === 'M') slow = { max: Number(a), calls: Number(b) };
  });
  await worker.ready;
  const { tx, outbox } = publisher;
  const committed = new Map<string, number>();
  const count = BOUNDS.seconds * BOUNDS.rate;
  const everyMs = 1000 / BOUNDS.rate;
  const start = Date.now();
  for (let i = 0; i < count; i++) {
    const topic = i % 2 === 0 ? 'bounds.a' : 'bounds.b';
    const { id } = await tx.withTransaction(() => outbox.publish(topic, { i }));
    committed.set(id, Date.now());
    const wait = start + (i + 1) * everyMs - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
  const expected = count * 2;
  const deadline = Date.now() + 15_000;
  while (fast.length + arrivals.length < expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  worker.go();
  await worker.exited;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const delays = [...fast, ...arrivals]
    .map(([id, at]) => at - (committed.get(id) ?? NaN))
    .filter(Number.isFinite)
    .sort((x, y) => x - y);
  return {
    variant,
    events: count,
    ratePerSecond: BOUNDS.rate,
    expected,
    received: delays.length,
    p50: percentile(delays, 50),
    p95: percentile(delays, 95),
    p99: percentile(delays, 99),
    slowBound: variant === 'none' ? null : variant === 'two' ? 2 : defaultBound,
    slowCalls: slow.calls,
    slowMaxRunning: slow.max,
  };
}
