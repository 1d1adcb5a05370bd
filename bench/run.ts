/**
 * npm run bench — the library against hand-written SQL with the bare drivers, in the same run, on
 * PostgreSQL, MariaDB and SQLite. Run it alone on the machine. Writes bench/results/latest.{json,md}.
 * OUTBOX_BENCH_ONLY=postgres,sqlite limits the databases, OUTBOX_BENCH_SECTIONS=enqueue,drain,latency,
 * slow-handler,bounds,memory,claim,operations,ordered,observability,transactional,inbox,admin the measures (bounds: OUTBOX_BENCH_BOUNDS_SECONDS,
 * default 30, per run; OUTBOX_BENCH_BOUNDS_VARIANTS=none,default,two its runs, the first without the slow handler); OUTBOX_BENCH_QUICK=1 shrinks the sizes.
 * OUTBOX_BENCH_DRAIN=4x50,1x500 limits the drain to those workers×batch cases, OUTBOX_BENCH_IMPLS=lib,raw its
 * implementations (relay, lease-relay — PostgreSQL only —, raw, lib), OUTBOX_BENCH_DRAIN_ROUNDS its rounds (for a
 * before/after of one case), OUTBOX_BENCH_DRAIN_EVENTS its events per drain (default 50,000).
 * OUTBOX_BENCH_ORDERED_CASES=1w_b500_1key_run,… limits per-key order's drains to those cases (bench/ordered.ts);
 * strict_step is PostgreSQL's hot key acknowledged by event against raw SQL doing its step (bench/strict-step.ts;
 * OUTBOX_BENCH_STRICT_STEP_EVENTS its events, default 10,000).
 * OUTBOX_BENCH_OBSERVABILITY_VARIANTS=off,metrics limits the observability drains to those variants, and skips its
 * enqueue (bench/observability.ts).
 * OUTBOX_BENCH_REPORT_ONLY=1 measures nothing: it renders latest.md again from latest.json.
 * OUTBOX_BENCH_SECTIONS=idle-tx (not in the default list: about 20 minutes in full on the 2-core machine, most of it MariaDB's held phase) measures the claim
 * with a transaction held open on PostgreSQL and MariaDB and writes bench/results/idle-transaction.{json,md}
 * only; latest.{json,md} are written only when one of the other sections ran.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { trace } from '@opentelemetry/api';
import { OutboxService } from '../lib';
import { OUTBOX_DEFAULTS } from '../lib/outbox.options';
import { OUTBOX_STORE } from '../lib/outbox.constants';
import type { OutboxStore } from '../lib/store/outbox.store';
import { DBS, libraryApp, percentile, SLOW_HANDLER_MS, wakeUpOption, type Db } from './env';
import { idleTransaction, idleTxReport, type IdleTxResult, type MvccDb } from './idle-tx';
import { serverCpuUs } from './server-cpu';
import { createTables, dropTables, fill, raw, rawEnqueue, rawOrderedEnqueue, type Raw } from './raw';
import { createRelayTable, dropRelayTable, fillRelay, relayDelivered, relayEnqueue } from './relay';
import {
  createLeaseRelayTable,
  dropLeaseRelayTable,
  fillLeaseRelay,
  leaseRelayClient,
  leaseRelayDelivered,
} from './lease-relay';
import {
  createStrictStepTables,
  dropStrictStepTables,
  fillStrictStep,
  strictStepDelivered,
  strictStepDrain,
} from './strict-step';
import { operationsBench, operationsRows, type OperationsResult, type OperationsSizes } from './operations';
import { BOUNDS, boundsRun, type BoundsResult, type BoundsVariant } from './bounds';
import { transactionalBench, transactionalReport, type TransactionalResult } from './transactional';
import { inboxBench, inboxReport, type InboxResult } from './inbox';
import { adminBench, adminReport, type AdminResult, type AdminSizes } from './admin';
import { BENCH_ORDERING, fillOrdered, ORDERED_TARGETS, orderedReport, type OrderedResult } from './ordered';
import {
  observabilityEnv,
  observabilityOptions,
  observabilityReport,
  unregisterSdk,
  type ObservabilityResult,
  type ObservabilityVariant,
} from './observability';

const QUICK = process.env.OUTBOX_BENCH_QUICK === '1';
const ONLY = process.env.OUTBOX_BENCH_ONLY?.split(',') as Db[] | undefined;
const LATEST_SECTIONS = [
  'enqueue',
  'drain',
  'latency',
  'slow-handler',
  'bounds',
  'memory',
  'claim',
  'operations',
  'ordered',
  'observability',
  'transactional',
  'inbox',
  'admin',
];
const SECTIONS = new Set(process.env.OUTBOX_BENCH_SECTIONS?.split(',') ?? LATEST_SECTIONS);
const SIZES = {
  enqueueSeconds: QUICK ? 1 : 3,
  drainEvents: Number(process.env.OUTBOX_BENCH_DRAIN_EVENTS ?? (QUICK ? 5_000 : 50_000)),
  /** A hot key acknowledged by event, library and raw: about a thousand events a second. */
  strictStepEvents: Number(process.env.OUTBOX_BENCH_STRICT_STEP_EVENTS ?? (QUICK ? 2_000 : 10_000)),
  /** The transactional handlers' drains, in this process: a row inserted per event, so fewer than the no-op drain. */
  transactionalEvents: QUICK ? 2_000 : 10_000,
  /** The inbox's consumer: messages processed per variant and round, 10 in flight, a row inserted per message. */
  inboxEvents: QUICK ? 2_000 : 10_000,
  /** The observability drains: long enough that a collection or a stall weighs little in one round. */
  observabilityEvents: QUICK ? 5_000 : 100_000,
  /** The admin section's drains, without and with open pages: long enough for a page's few reads to show. */
  adminEvents: QUICK ? 5_000 : 100_000,
  latencySeconds: QUICK ? 3 : 10,
  /** The slow-handler run: fast events published at 200/s while one handler holds its lane. */
  slowRunEvents: QUICK ? 200 : 1_000,
  memoryEvents: QUICK ? 20_000 : 200_000,
  history: QUICK ? 100_000 : 1_000_000,
  pending: 10_000,
};
const IDLE_TX_SIZES = { calm: QUICK ? 5_000 : 10_000, held: QUICK ? 20_000 : 100_000, round: 1_000 };
const OPERATIONS_SIZES: OperationsSizes = {
  history: SIZES.history,
  pending: SIZES.pending,
  soakEvents: QUICK ? 20_000 : 200_000,
  soakRatePerSecond: 5_000,
  enqueueSeconds: SIZES.enqueueSeconds,
};
/** The admin page (issue 40): the overview on a week's table of `history` rows, and the drain beside open pages. */
const ADMIN_SIZES: AdminSizes = {
  rows: SIZES.history,
  samples: QUICK ? 15 : 20,
  drainEvents: SIZES.adminEvents,
  rounds: QUICK ? 3 : 9,
  cpuWindows: QUICK ? 1 : 3,
  cpuWindowSeconds: QUICK ? 5 : 20,
};
const TABLE = 'bench_outbox';
/** Issue 15's drain targets: library throughput over the minimal relay's, in the same run. */
const RELAY_TARGETS: Partial<Record<Db, Record<string, number>>> = {
  sqlite: { '1w_b500': 0.5, '1w_b50': 0.45 },
  postgres: { '1w_b500': 0.7, '4w_b500': 0.75 },
  mariadb: { '1w_b500': 0.75, '4w_b500': 0.9 },
};
/** Issue 41's drain targets: library throughput over the leased relay's (bench/lease-relay.ts), in the same run. */
const LEASE_RELAY_TARGETS: Partial<Record<Db, Record<string, number>>> = {
  postgres: { '1w_b500': 0.75, '4w_b500': 0.75 },
};
/** OUTBOX_BENCH_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof' profiles the drain's worker processes. */
const NODE_ARGS = process.env.OUTBOX_BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
const ENQUEUE_ROUNDS = QUICK ? 1 : 3;
const DRAIN_ROUNDS = Number(process.env.OUTBOX_BENCH_DRAIN_ROUNDS ?? (QUICK ? 1 : 3));
const DRAIN_CASES = process.env.OUTBOX_BENCH_DRAIN?.split(',');
/** The drain's implementations: the two relays, hand-written SQL on the library's schema, the library. */
type DrainImpl = 'relay' | 'lease-relay' | 'raw' | 'lib';
const ALL_DRAIN_IMPLS: DrainImpl[] = ['relay', 'lease-relay', 'raw', 'lib'];
const DRAIN_IMPLS = (process.env.OUTBOX_BENCH_IMPLS?.split(',') as DrainImpl[] | undefined) ?? ALL_DRAIN_IMPLS;
/** The leased relay is written for PostgreSQL alone (identity, jsonb, named prepared statements). */
const drainImplsOf = (db: Db) => DRAIN_IMPLS.filter((impl) => impl !== 'lease-relay' || db === 'postgres');
const ROOT = join(__dirname, '..');

const log = (line: string) => process.stderr.write(`${line}\n`);
const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);

interface Child {
  ready: Promise<void>;
  lines: string[];
  onLine: (listener: (line: string) => void) => void;
  go(): void;
  result: Promise<Record<string, number>>;
  /** Resolves when the process has ended, however it ended. */
  exited: Promise<void>;
  kill(): void;
}

function child(args: string[], nodeArgs: string[] = [], env: Record<string, string> = {}): Child {
  const proc = spawn(
    process.execPath,
    [...nodeArgs, '-r', 'ts-node/register/transpile-only', join(ROOT, 'bench/child.ts'), ...args],
    {
      cwd: ROOT,
      env: { ...process.env, TS_NODE_PROJECT: join(ROOT, 'tsconfig.json'), ...env },
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  const lines: string[] = [];
  const listeners: Array<(line: string) => void> = [];
  let resolveReady!: () => void;
  let resolveResult!: (r: Record<string, number>) => void;
  let rejectAll!: (e: Error) => void;
  const ready = new Promise<void>((resolve, reject) => ((resolveReady = resolve), (rejectAll = reject)));
  const result = new Promise<Record<string, number>>((resolve, reject) => {
    resolveResult = resolve;
    proc.on(
      'exit',
      (code) => code !== 0 && code !== null && reject(new Error(`child ${args.join(' ')} exited ${code}`)),
    );
  });
  proc.on('exit', (code) => code && rejectAll(new Error(`child ${args.join(' ')} exited ${code}`)));
  createInterface({ input: proc.stdout }).on('line', (line) => {
    lines.push(line);
    if (line === 'READY') resolveReady();
    else if (line.startsWith('{')) resolveResult(JSON.parse(line) as Record<string, number>);
    for (const l of listeners) l(line);
  });
  return {
    ready,
    lines,
    onLine: (l) => listeners.push(l),
    go: () => proc.stdin.write('go\n'),
    result,
    exited: new Promise((resolve) => proc.once('exit', () => resolve())),
    kill: () => proc.kill('SIGKILL'),
  };
}

const median = (values: number[]) =>
  percentile(
    [...values].sort((a, b) => a - b),
    50,
  );

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const start = process.hrtime.bigint();
  const value = await work();
  return { ms: Number(process.hrtime.bigint() - start) / 1e6, value };
}

/** (a) Business transactions per second, 4 concurrent clients, with and without an outbox event. */
async function enqueue(db: Db) {
  const r = await raw(db, 4);
  await createTables(db, r, TABLE);
  const loop = enqueueLoop;
  const app = await libraryApp(db, TABLE, { worker: { enabled: false } }, 4);
  // Where the database has a wake-up of its own (PostgreSQL's NOTIFY after commit, SQLite's file
  // watch), the same publish without it: what the wake-up costs the enqueue.
  const quiet =
    db === 'mariadb' ? undefined : await libraryApp(db, TABLE, { worker: { enabled: false }, wakeUp: false }, 4);
  const insert = `INSERT INTO ${q(db, `${TABLE}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (${db === 'postgres' ? '$1, $2' : '?, ?'})`;
  const libOnce =
    (withOutbox: boolean, on = app) =>
    () => {
      const tx = on.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
      return tx.withTransaction(async () => {
        const id = crypto.randomUUID();
        await tx.tx.query(insert, [id, 42]);
        if (withOutbox) await on.get(OutboxService).publish('bench.event', { orderId: id, amount: 42 });
      });
    };
  // Interleaved rounds, medians: the tables grow as the run goes, and this machine is noisy.
  await createRelayTable(db, r, TABLE);
  const samples = {
    rawBusiness: [] as number[],
    libBusiness: [] as number[],
    rawOutbox: [] as number[],
    libOutbox: [] as number[],
    relayOutbox: [] as number[],
    libQuiet: [] as number[],
  };
  const variants = [
    () => rawEnqueue(db, r, TABLE, false),
    libOnce(false),
    () => rawEnqueue(db, r, TABLE, true),
    () => relayEnqueue(db, r, TABLE, crypto.randomUUID()),
    libOnce(true),
    ...(quiet ? [libOnce(true, quiet)] : []),
  ];
  for (const variant of variants) await loop(variant, ENQUEUE_WARM_UP_SECONDS);
  for (let round = 0; round < ENQUEUE_ROUNDS; round++) {
    samples.rawBusiness.push(await loop(() => rawEnqueue(db, r, TABLE, false)));
    samples.libBusiness.push(await loop(libOnce(false)));
    samples.rawOutbox.push(await loop(() => rawEnqueue(db, r, TABLE, true)));
    samples.relayOutbox.push(await loop(() => relayEnqueue(db, r, TABLE, crypto.randomUUID())));
    samples.libOutbox.push(await loop(libOnce(true)));
    if (quiet) samples.libQuiet.push(await loop(libOnce(true, quiet)));
  }
  await dropRelayTable(db, r, TABLE);
  await app.close();
  await quiet?.close();
  await r.close();
  const rawBusiness = median(samples.rawBusiness);
  const rawOutbox = median(samples.rawOutbox);
  const libBusiness = median(samples.libBusiness);
  const libOutbox = median(samples.libOutbox);
  const relayOutbox = median(samples.relayOutbox);
  return {
    rawBusiness,
    rawOutbox,
    rawRatio: rawOutbox / rawBusiness,
    relayOutbox,
    relayRatio: relayOutbox / rawBusiness,
    libBusiness,
    libOutbox,
    libRatio: libOutbox / libBusiness,
    ...(quiet ? { libQuietRatio: median(samples.libQuiet) / libBusiness } : {}),
  };
}

/** The bench table's events delivered at their first attempt. */
async function deliveredOnce(db: Db, r: Raw): Promise<number> {
  const sql = `SELECT count(*) AS ${q(db, 'n')} FROM ${q(db, TABLE)} WHERE ${q(db, 'status')} = 'delivered' AND ${q(db, 'attempts')} = 1`;
  return Number((await r.query(sql)).rows[0].n);
}

/**
 * The table a drain of `impl` reads: the relays' tables of their own, made and filled before it and dropped
 * after it has been counted; the library's (and raw SQL's on it), which the next drain makes afresh.
 */
function drainTable(db: Db, r: Raw, impl: DrainImpl) {
  if (impl === 'relay') {
    return {
      fill: async (events: number) => {
        await createRelayTable(db, r, TABLE);
        await fillRelay(db, r, TABLE, events);
      },
      delivered: () => relayDelivered(db, r, TABLE),
      drop: () => dropRelayTable(db, r, TABLE),
    };
  }
  if (impl === 'lease-relay') {
    return {
      fill: async (events: number) => {
        await createLeaseRelayTable(r, TABLE);
        await fillLeaseRelay(r, TABLE, events);
      },
      delivered: () => leaseRelayDelivered(r, TABLE),
      drop: () => dropLeaseRelayTable(r, TABLE),
    };
  }
  return {
    fill: (events: number, keys?: number) => (keys ? fillOrdered(db, TABLE, events, keys) : fill(db, r, TABLE, events)),
    delivered: () => deliveredOnce(db, r),
    drop: () => Promise.resolve(),
  };
}

/**
 * (b) Events per second draining pre-filled events with a no-op handler; exactly once, checked. With
 * `keys`, the library's events are ordered per key (published by the library, event n on key n mod keys).
 * `beside` runs beside the timed drain (the admin section's open pages): started once the workers are
 * ready, stopped when they are done.
 */
async function drain(
  db: Db,
  impl: DrainImpl,
  workers: number,
  batch: number,
  keys?: number,
  extraEnv: Record<string, string> = {},
  events = SIZES.drainEvents,
  beside?: () => Promise<() => Promise<void>>,
) {
  const r = await raw(db, 2);
  await createTables(db, r, TABLE);
  const table = drainTable(db, r, impl);
  await table.fill(events, keys);
  const env: Record<string, string> = { ...(keys ? { OUTBOX_BENCH_ORDERED: '1' } : {}), ...extraEnv };
  const children = Array.from({ length: workers }, () =>
    child([`${impl}-drain`, db, TABLE, String(batch)], NODE_ARGS, env),
  );
  await Promise.all(children.map((c) => c.ready));
  const stopBeside = await beside?.();
  const serverBefore = serverCpuUs(db);
  const { ms, value } = await timed(async () => {
    for (const c of children) c.go();
    return Promise.all(children.map((c) => c.result));
  }).finally(() => stopBeside?.());
  const serverAfter = serverCpuUs(db);
  const delivered = value.reduce((sum, v) => sum + v.delivered, 0);
  const n = await table.delivered();
  await table.drop();
  await r.close();
  const exactlyOnce = delivered === events && n === events;
  if (!exactlyOnce) throw new Error(`${db} ${impl} drain: ${delivered} handled, ${n} delivered once, of ${events}`);
  // The workers' own CPU per event, where they report it: steadier than a rate on a shared machine.
  const cpuUs = value.reduce((sum, v) => sum + ((v as { cpuUs?: number }).cpuUs ?? Number.NaN), 0);
  // The server's CPU per event, where it runs on this machine: part of what a drain costs it.
  const serverUs = serverBefore === undefined || serverAfter === undefined ? Number.NaN : serverAfter - serverBefore;
  return {
    eventsPerSecond: events / (ms / 1000),
    exactlyOnce,
    cpuUsPerEvent: cpuUs / events,
    serverUsPerEvent: serverUs / events,
  };
}

/**
 * Events per second of `workers` scheduled workers (bench/child.ts lib-run) draining `SIZES.drainEvents`
 * events committed at once, while they run: from the commit to the last delivery; exactly once,
 * checked. With `keys`, ordered per key (event n on key n mod keys). A `drain()` per process, as (b)
 * measures, ends a worker at its first empty claim: ordered, that is as soon as the other workers hold
 * every key's front, and the drain ran on fewer workers than it was given.
 */
async function runningDrain(
  db: Db,
  workers: number,
  batch: number,
  keys?: number,
  byRun = false,
  total = SIZES.drainEvents,
) {
  const r = await raw(db, 2);
  await createTables(db, r, TABLE);
  const env: Record<string, string> = keys ? { OUTBOX_BENCH_ORDERED: byRun ? 'run' : '1' } : {};
  const children = Array.from({ length: workers }, () => child(['lib-run', db, TABLE, String(batch)], NODE_ARGS, env));
  await Promise.all(children.map((c) => c.ready));
  const counts = children.map(() => ({ count: 0, last: 0 }));
  let finished!: () => void;
  const allDelivered = new Promise<void>((resolve) => (finished = resolve));
  children.forEach((c, i) =>
    c.onLine((line) => {
      const [tag, count, last] = line.split(' ');
      if (tag !== 'C') return;
      counts[i] = { count: Number(count), last: Number(last) };
      if (counts.reduce((sum, x) => sum + x.count, 0) >= total) finished();
    }),
  );
  await fillOrdered(db, TABLE, total, keys, total);
  const committed = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      for (const c of children) c.kill();
      reject(new Error(`${db} running drain: ${JSON.stringify(counts)} after 10 minutes, of ${total}`));
    }, 600_000);
  });
  await Promise.race([allDelivered, stalled]).finally(() => clearTimeout(timer));
  const ms = Math.max(...counts.map((x) => x.last)) - committed;
  for (const c of children) c.go();
  await Promise.all(children.map((c) => c.exited));
  const delivered = counts.reduce((sum, x) => sum + x.count, 0);
  const n = await deliveredOnce(db, r);
  await r.close();
  if (delivered !== total || n !== total) {
    throw new Error(`${db} running drain: ${delivered} handled, ${n} delivered once, of ${total}`);
  }
  return { eventsPerSecond: total / (ms / 1000), exactlyOnce: true };
}

/**
 * (f) Per-key order: each case of ORDERED_TARGETS drained ordered and unordered by the library, rounds
 * interleaved; and the enqueue of a business row with an ordered event on one of 100 keys, against the
 * same with an unordered event and with none.
 */
async function ordered(db: Db): Promise<OrderedResult> {
  const result: OrderedResult = { drain: {} };
  const cases = process.env.OUTBOX_BENCH_ORDERED_CASES?.split(',');
  for (const name of Object.keys(ORDERED_TARGETS[db]).filter((c) => !cases || cases.includes(c))) {
    const [, workers, batch, keys] = /^(\d+)w_b(\d+)_(\d+)keys?/.exec(name)!.map(Number);
    const byRun = name.endsWith('_run');
    const samples = { ordered: [] as number[], unordered: [] as number[] };
    for (let round = 0; round < DRAIN_ROUNDS; round++) {
      samples.unordered.push((await runningDrain(db, workers, batch)).eventsPerSecond);
      samples.ordered.push((await runningDrain(db, workers, batch, keys, byRun)).eventsPerSecond);
    }
    result.drain[name] = median(samples.ordered);
    result.drain[`${name}_unordered`] = median(samples.unordered);
    log(
      `   ${name}: ordered ${samples.ordered.map(Math.round).join(', ')}/s, unordered ${samples.unordered.map(Math.round).join(', ')}/s`,
    );
  }
  if (db === 'postgres' && (!cases || cases.includes('strict_step'))) result.strictStep = await strictStep();
  if (!SECTIONS.has('enqueue')) return result;
  const r = await raw(db, 4);
  await createTables(db, r, TABLE);
  const app = await libraryApp(db, TABLE, { worker: { enabled: false }, ...BENCH_ORDERING }, 4);
  const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
  const outbox = app.get(OutboxService);
  const insert = `INSERT INTO ${q(db, `${TABLE}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (${db === 'postgres' ? '$1, $2' : '?, ?'})`;
  const once = (event: 'none' | 'unordered' | 'ordered') => () =>
    tx.withTransaction(async () => {
      const id = crypto.randomUUID();
      await tx.tx.query(insert, [id, 42]);
      // Another topic than the ordered one: the same module, unordered.
      if (event === 'unordered')
        await outbox.publish('bench.other', { orderId: id }, { key: `k${Math.floor(Math.random() * 100)}` });
      if (event === 'ordered')
        await outbox.publish('bench.event', { orderId: id }, { key: `k${Math.floor(Math.random() * 100)}` });
    });
  // Raw SQL doing the same statements with the bare driver: none, the event's insert, and the key's upsert with it.
  const rawOnce = (event: 'none' | 'unordered' | 'ordered') => () =>
    event === 'ordered'
      ? rawOrderedEnqueue(db, r, TABLE, `k${Math.floor(Math.random() * 100)}`)
      : rawEnqueue(db, r, TABLE, event === 'unordered');
  const samples = { none: [] as number[], unordered: [] as number[], ordered: [] as number[] };
  const rawSamples = { none: [] as number[], unordered: [] as number[], ordered: [] as number[] };
  for (let round = 0; round < ENQUEUE_ROUNDS; round++) {
    for (const event of ['none', 'unordered', 'ordered'] as const) {
      samples[event].push(await enqueueLoop(once(event)));
      rawSamples[event].push(await enqueueLoop(rawOnce(event)));
    }
  }
  await app.close();
  await dropTables(db, r, TABLE);
  await r.close();
  const libBusiness = median(samples.none);
  const libOutbox = median(samples.unordered);
  const libOrdered = median(samples.ordered);
  const rawBusiness = median(rawSamples.none);
  result.enqueue = {
    libBusiness,
    libOutbox,
    libOrdered,
    ratio: libOutbox / libBusiness,
    orderedRatio: libOrdered / libBusiness,
    rawRatio: median(rawSamples.unordered) / rawBusiness,
    rawOrderedRatio: median(rawSamples.ordered) / rawBusiness,
  };
  return result;
}

/**
 * (f2) A hot key acknowledged by event, on PostgreSQL: the library's one worker × 500 on one key against raw SQL
 * doing the same durable per-event step in a loop (bench/strict-step.ts), sent as one script and as one
 * round trip per statement; rounds interleaved, `SIZES.strictStepEvents` events each.
 */
async function strictStep(): Promise<NonNullable<OrderedResult['strictStep']>> {
  const events = SIZES.strictStepEvents;
  const r = await raw('postgres', 2);
  await createStrictStepTables(r, TABLE);
  const client = await leaseRelayClient();
  const samples = { library: [] as number[], script: [] as number[], statements: [] as number[] };
  try {
    for (let round = 0; round < DRAIN_ROUNDS; round++) {
      for (const send of ['script', 'statements'] as const) {
        await fillStrictStep(r, TABLE, events);
        const { ms, value } = await timed(() => strictStepDrain(client, TABLE, 500, send, () => Promise.resolve()));
        const { delivered, frontCleared } = await strictStepDelivered(r, TABLE);
        if (value !== events || delivered !== events || !frontCleared) {
          throw new Error(
            `strict step (${send}): ${value} handled, ${delivered} delivered, front cleared ${frontCleared}`,
          );
        }
        samples[send].push(events / (ms / 1000));
      }
      samples.library.push((await runningDrain('postgres', 1, 500, 1, false, events)).eventsPerSecond);
    }
  } finally {
    await client.end();
    await dropStrictStepTables(r, TABLE);
    await r.close();
  }
  log(
    `   strict_step: library ${samples.library.map(Math.round).join(', ')}/s, raw script ${samples.script.map(Math.round).join(', ')}/s, ` +
      `raw statements ${samples.statements.map(Math.round).join(', ')}/s`,
  );
  return {
    events,
    library: median(samples.library),
    rawScript: median(samples.script),
    rawStatements: median(samples.statements),
  };
}

/**
 * (g) Observability: the drain (1 worker × batch 500) and the enqueue of a business change with an
 * event, with the outbox's Prometheus metrics on and off, rounds interleaved.
 */
async function observability(db: Db): Promise<ObservabilityResult> {
  const all: ObservabilityVariant[] = ['off', 'api', 'tracing', 'metrics', 'on', 'span', 'sampled', 'sampledSpan'];
  // OUTBOX_BENCH_OBSERVABILITY_VARIANTS=off,metrics: those drains only, and no enqueue (a before/after of one cost).
  const picked = process.env.OUTBOX_BENCH_OBSERVABILITY_VARIANTS?.split(',') as ObservabilityVariant[] | undefined;
  const variants = picked ?? all;
  const drains = Object.fromEntries(variants.map((v) => [v, [] as number[]])) as Record<ObservabilityVariant, number[]>;
  const cpu = Object.fromEntries(variants.map((v) => [v, [] as number[]])) as Record<ObservabilityVariant, number[]>;
  for (let round = 0; round < DRAIN_ROUNDS; round++) {
    // Each round starts one variant later: none always runs first, or right after another.
    for (let i = 0; i < variants.length; i++) {
      const v = variants[(i + round) % variants.length];
      const { eventsPerSecond, cpuUsPerEvent } = await drain(
        db,
        'lib',
        1,
        500,
        undefined,
        observabilityEnv(v),
        SIZES.observabilityEvents,
      );
      drains[v].push(eventsPerSecond);
      cpu[v].push(cpuUsPerEvent);
    }
  }
  const us = (v: ObservabilityVariant) => `${v} ${median(cpu[v]).toFixed(2)}`;
  log(`   worker CPU per event, medians (µs): ${variants.map(us).join(', ')}`);
  if (picked) {
    log(`   drains ${variants.map((v) => `${v} ${Math.round(median(drains[v]))}`).join(', ')}/s`);
    return { drainOff: Number.NaN, drainApi: Number.NaN, drainOn: Number.NaN } as ObservabilityResult;
  }
  const r = await raw(db, 4);
  await createTables(db, r, TABLE);
  const insert = `INSERT INTO ${q(db, `${TABLE}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (${db === 'postgres' ? '$1, $2' : '?, ?'})`;
  const appOf = (variant: ObservabilityVariant) =>
    libraryApp(db, TABLE, { worker: { enabled: false }, ...observabilityOptions(variant) }, 4);
  /** One business transaction with its event; with `traced`, inside a span of the application's. */
  const once = (app: Awaited<ReturnType<typeof appOf>>, traced = false) => {
    const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
    const outbox = app.get(OutboxService);
    const run = () =>
      tx.withTransaction(async () => {
        const id = crypto.randomUUID();
        await tx.tx.query(insert, [id, 42]);
        await outbox.publish('bench.event', { orderId: id, amount: 42 });
      });
    if (!traced) return run;
    const tracer = trace.getTracer('bench');
    return () => tracer.startActiveSpan('POST /orders', (span) => run().finally(() => span.end()));
  };
  const enqueues = { off: [] as number[], api: [] as number[], offTraced: [] as number[], on: [] as number[] };
  // Without an SDK first: what the defaults cost an application that registers none.
  const plain = await Promise.all([appOf('off'), appOf('api')]);
  for (let round = 0; round < ENQUEUE_ROUNDS; round++) {
    enqueues.off.push(await enqueueLoop(once(plain[0])));
    enqueues.api.push(await enqueueLoop(once(plain[1])));
  }
  for (const app of plain) await app.close();
  // Then with the SDK registered (by the `on` app's options), the same span around both.
  const traced = [await appOf('on'), await appOf('off')];
  for (let round = 0; round < ENQUEUE_ROUNDS; round++) {
    enqueues.offTraced.push(await enqueueLoop(once(traced[1], true)));
    enqueues.on.push(await enqueueLoop(once(traced[0], true)));
  }
  for (const app of traced) await app.close();
  await unregisterSdk();
  await dropTables(db, r, TABLE);
  await r.close();
  const list = (xs: number[]) => xs.map(Math.round).join(', ');
  log(
    `   drain off ${list(drains.off)}/s, api ${list(drains.api)}/s, tracing ${list(drains.tracing)}/s, ` +
      `metrics ${list(drains.metrics)}/s, on ${list(drains.on)}/s, span per event ${list(drains.span)}/s, ` +
      `sampled ${list(drains.sampled)}/s, sampled span per event ${list(drains.sampledSpan)}/s`,
  );
  log(
    `   enqueue off ${list(enqueues.off)}, api ${list(enqueues.api)}; traced: off ${list(enqueues.offTraced)}, on ${list(enqueues.on)} tx/s`,
  );
  return {
    drainEvents: SIZES.observabilityEvents,
    drainOff: median(drains.off),
    drainApi: median(drains.api),
    drainOn: median(drains.on),
    drainTracing: median(drains.tracing),
    drainMetrics: median(drains.metrics),
    drainSpan: median(drains.span),
    drainSampled: median(drains.sampled),
    drainSampledSpan: median(drains.sampledSpan),
    cpuUsPerEvent: Object.fromEntries(variants.map((v) => [v, median(cpu[v])])),
    enqueueOff: median(enqueues.off),
    enqueueApi: median(enqueues.api),
    enqueueOffTraced: median(enqueues.offTraced),
    enqueueOn: median(enqueues.on),
  };
}

/**
 * Transactions per second of `once`, run back to back by 4 clients for the enqueue's seconds (or
 * `seconds`). Warm `once` first (see `ENQUEUE_WARM_UP_SECONDS`).
 */
async function enqueueLoop(once: () => Promise<void>, seconds = SIZES.enqueueSeconds): Promise<number> {
  const deadline = Date.now() + seconds * 1000;
  let count = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (Date.now() < deadline) {
        await once();
        count++;
      }
    }),
  );
  return count / seconds;
}

/**
 * A production service publishes from warm code: each variant first runs this long, unmeasured, so the
 * first round does not time V8 compiling it (the library's publish path took a round at about 0.7 of its
 * later rate).
 */
const ENQUEUE_WARM_UP_SECONDS = 1;

/**
 * (c) Commit-to-handler latency with the handler in another application instance: woken by the
 * database's own channel (PostgreSQL LISTEN/NOTIFY, the SQLite file's changes; MariaDB has none, so its
 * poll), or with `wake` 'redis' by ClientProxyWakeUp over Redis in both instances.
 */
/**
 * Commit → handler in another process: `count` events published one per transaction every `everyMs`
 * (by schedule, so a slow commit does not slow the rate), the listener's batch `batch`. With `slow`, a
 * handler that holds its lane for `SLOW_HANDLER_MS` starts first, and the events come while it runs.
 */
async function latency(
  db: Db,
  wake: 'own' | 'redis' = 'own',
  run = { count: (SIZES.latencySeconds * 1000) / 20, everyMs: 20, batch: 500, slow: false },
) {
  const r = await raw(db, 1);
  await dropTables(db, r, TABLE);
  await createTables(db, r, TABLE);
  await r.close();
  const listener = child(['lib-listen', db, TABLE, String(run.batch), wake]);
  await listener.ready;
  const received = new Map<string, number>();
  let slowStarted!: () => void;
  const slowStart = new Promise<void>((resolve) => (slowStarted = resolve));
  listener.onLine((line) => {
    const [tag, id, at] = line.split(' ');
    if (tag === 'R') received.set(id, Number(at));
    else if (tag === 'S') slowStarted();
  });
  const app = await libraryApp(db, TABLE, { worker: { enabled: false }, ...wakeUpOption(wake) }, 2);
  const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
  const outbox = app.get(OutboxService);
  if (run.slow) {
    await tx.withTransaction(() => outbox.publish('bench.slow', {}));
    await slowStart;
  }
  const committed = new Map<string, number>();
  const { count, everyMs } = run;
  const start = Date.now();
  for (let i = 0; i < count; i++) {
    const { id } = await tx.withTransaction(() => outbox.publish('bench.event', { i }));
    committed.set(id, Date.now());
    const wait = start + (i + 1) * everyMs - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
  const deadline = Date.now() + 15_000;
  while (received.size < count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  await app.close();
  listener.go(); // asks it to stop
  await new Promise((resolve) => setTimeout(resolve, 200));
  listener.kill();
  const delays = [...committed]
    .map(([id, at]) => (received.get(id) ?? NaN) - at)
    .filter(Number.isFinite)
    .sort((a, b) => a - b);
  const r2 = await raw(db, 1);
  await dropTables(db, r2, TABLE);
  await r2.close();
  return {
    events: count,
    ratePerSecond: 1000 / everyMs,
    received: delays.length,
    p50: percentile(delays, 50),
    p95: percentile(delays, 95),
    p99: percentile(delays, 99),
  };
}

/**
 * Per-target bounds (bounds.ts): fast targets beside a slow handler, at a steady rate; without the slow
 * handler, with it at the default bound, and with `{ concurrency: 2 }`, each on a fresh table.
 */
async function bounds(db: Db): Promise<BoundsResult[]> {
  const runs: BoundsResult[] = [];
  const variants = (process.env.OUTBOX_BENCH_BOUNDS_VARIANTS?.split(',') ?? [
    'none',
    'default',
    'two',
  ]) as BoundsVariant[];
  for (const variant of variants) {
    const r = await raw(db, 1);
    await dropTables(db, r, TABLE);
    await createTables(db, r, TABLE);
    const app = await libraryApp(db, TABLE, { worker: { enabled: false } }, 2);
    const publisher = {
      tx: app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost),
      outbox: app.get(OutboxService),
    };
    try {
      const spawnWorker = (url: string) => child(['lib-bounds', db, TABLE, variant, url]);
      runs.push(await boundsRun(variant, spawnWorker, publisher, OUTBOX_DEFAULTS.worker.targetConcurrency));
    } finally {
      await app.close();
      await dropTables(db, r, TABLE);
      await r.close();
    }
  }
  return runs;
}

/**
 * (d) RSS of a worker process before, at each quarter of, and after draining many events (after a full
 * GC): with the default batch (50, judged against the target) and with batch 500; and the hand-written
 * loop with the bare driver at batch 500, which shows what Node and the driver take by themselves.
 */
async function memory(db: Db) {
  const mb = (bytes: number) => bytes / 2 ** 20;
  const run = async (mode: 'lib-memory' | 'raw-memory', batch: number) => {
    const r = await raw(db, 2);
    await dropTables(db, r, TABLE);
    await createTables(db, r, TABLE);
    await fill(db, r, TABLE, SIZES.memoryEvents);
    await r.close();
    const worker = child([mode, db, TABLE, String(batch), String(SIZES.memoryEvents)], ['--expose-gc']);
    await worker.ready;
    worker.go();
    const result = await worker.result;
    const quarters = result.rssQuarters as unknown as number[];
    return {
      batch,
      events: result.delivered,
      rssBeforeMb: mb(result.rssBefore),
      // Sampled without a GC: they swing with the garbage of the moment; a leak would climb.
      rssQuartersMb: quarters.map(mb),
      rssAfterMb: mb(result.rssAfter),
      growthMb: mb(result.rssAfter - result.rssBefore),
      heapBeforeMb: mb(result.heapBefore),
      heapAfterMb: mb(result.heapAfter),
      heapTotalAfterMb: mb(result.heapTotalAfter),
    };
  };
  return {
    raw: await run('raw-memory', 500),
    libDefault: await run('lib-memory', OUTBOX_DEFAULTS.worker.batchSize),
    lib500: await run('lib-memory', 500),
  };
}

/** (e) A claim of 500 with 10,000 pending, without and with a long delivered history. */
async function claimCost(db: Db) {
  const measure = async (history: number) => {
    const r: Raw = await raw(db, 2);
    await createTables(db, r, TABLE);
    if (history) await fill(db, r, TABLE, history, 'delivered');
    await fill(db, r, TABLE, SIZES.pending);
    await r.close();
    const app = await libraryApp(db, TABLE, { worker: { enabled: false } }, 2);
    const store = app.get<OutboxStore>(OUTBOX_STORE);
    const times: number[] = [];
    for (let i = 0; i < 10; i++) {
      times.push((await timed(() => store.claim({ batchSize: 500, leaseMs: 60_000, maxAttempts: 10 }))).ms);
    }
    await app.close();
    return times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
  };
  const empty = await measure(0);
  const full = await measure(SIZES.history);
  return { emptyMs: empty, historyMs: full, ratio: full / empty };
}

async function main() {
  const dbs = ONLY ?? DBS;
  if (process.env.OUTBOX_BENCH_REPORT_ONLY === '1') {
    // Renders bench/results/latest.md again from latest.json (after a change to the report or its targets).
    const results = JSON.parse(readFileSync(join(ROOT, 'bench/results/latest.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    writeFileSync(
      join(ROOT, 'bench/results/latest.md'),
      report(
        results,
        dbs.filter((db) => db in results),
      ) +
        orderedReport(
          results,
          dbs.filter((db) => db in results),
        ),
    );
    return;
  }
  const results: Record<string, unknown> = {
    machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
    date: new Date().toISOString(),
    sizes: SIZES,
    drainRounds: DRAIN_ROUNDS,
  };
  const idleTx: Partial<Record<MvccDb, IdleTxResult>> = {};
  for (const db of dbs) {
    if (SECTIONS.has('idle-tx') && db !== 'sqlite') {
      log(`— ${db}: idle transaction`);
      idleTx[db] = await idleTransaction(db, IDLE_TX_SIZES, log);
    }
    if (!LATEST_SECTIONS.some((section) => SECTIONS.has(section))) continue;
    log(`— ${db}: enqueue`);
    const e = SECTIONS.has('enqueue') ? await enqueue(db) : undefined;
    log(`— ${db}: drain`);
    const d: Record<string, number> = {};
    for (const workers of !SECTIONS.has('drain') ? [] : db === 'sqlite' ? [1] : [1, 4]) {
      for (const batch of [50, 500]) {
        if (DRAIN_CASES && !DRAIN_CASES.includes(`${workers}x${batch}`)) continue;
        // Interleaved rounds, medians: one drain of 50,000 events lasts a second or two, and a single
        // one moved by ±20% between runs on this machine.
        const impls = drainImplsOf(db);
        const samples = Object.fromEntries(impls.map((impl) => [impl, [] as number[]]));
        const cpu = Object.fromEntries(impls.map((impl) => [impl, [] as number[]]));
        const server = Object.fromEntries(impls.map((impl) => [impl, [] as number[]]));
        for (let round = 0; round < DRAIN_ROUNDS; round++) {
          for (const impl of impls) {
            const run = await drain(db, impl, workers, batch);
            samples[impl].push(run.eventsPerSecond);
            cpu[impl].push(run.cpuUsPerEvent);
            server[impl].push(run.serverUsPerEvent);
          }
        }
        for (const impl of impls) {
          d[`${impl}_${workers}w_b${batch}`] = median(samples[impl]);
          // The workers' CPU per event, where they report it (the library's).
          const us = median(cpu[impl]);
          const serverUs = median(server[impl]);
          const perEvent =
            (Number.isNaN(us) ? '' : `; workers' CPU ${us.toFixed(1)} µs/event`) +
            (Number.isNaN(serverUs) ? '' : `; server's CPU ${serverUs.toFixed(1)} µs/event`);
          log(`   ${impl} ${workers}w b${batch}: ${samples[impl].map(Math.round).join(', ')}/s${perEvent}`);
        }
      }
    }
    log(`— ${db}: latency`);
    const l = SECTIONS.has('latency') ? await latency(db) : undefined;
    const lr = SECTIONS.has('latency') && db !== 'postgres' ? await latency(db, 'redis') : undefined;
    log(`— ${db}: slow handler`);
    // The listener's defaults (batch 50, 10 lanes), 200 events/s, without and then with a slow handler.
    const slowRun = (slow: boolean) =>
      latency(db, 'own', { count: SIZES.slowRunEvents, everyMs: 5, batch: OUTBOX_DEFAULTS.worker.batchSize, slow });
    const s = SECTIONS.has('slow-handler') ? { without: await slowRun(false), with: await slowRun(true) } : undefined;
    log(`— ${db}: per-target bounds`);
    const b = SECTIONS.has('bounds') ? await bounds(db) : undefined;
    log(`— ${db}: memory`);
    const m = db === 'postgres' && SECTIONS.has('memory') ? await memory(db) : undefined;
    log(`— ${db}: claim cost`);
    const c = db === 'sqlite' || !SECTIONS.has('claim') ? undefined : await claimCost(db);
    const o = SECTIONS.has('operations') ? await operationsBench(db, OPERATIONS_SIZES, log) : undefined;
    log(`— ${db}: per-key order`);
    const ord = SECTIONS.has('ordered') ? await ordered(db) : undefined;
    log(`— ${db}: observability`);
    const obs = SECTIONS.has('observability') ? await observability(db) : undefined;
    log(`— ${db}: transactional handlers`);
    const r = await raw(db, 1);
    let tr: TransactionalResult | undefined;
    if (SECTIONS.has('transactional')) {
      await createTables(db, r, TABLE);
      tr = await transactionalBench(db, r, TABLE, SIZES.transactionalEvents, DRAIN_ROUNDS, log);
    }
    log(`— ${db}: inbox`);
    let inbox: InboxResult | undefined;
    if (SECTIONS.has('inbox')) {
      await createTables(db, r, TABLE);
      inbox = await inboxBench(db, r, TABLE, SIZES.inboxEvents, DRAIN_ROUNDS, log);
    }
    log(`— ${db}: admin page`);
    const admin: AdminResult | undefined = SECTIONS.has('admin')
      ? await adminBench(
          db,
          ADMIN_SIZES,
          async (events, beside) => (await drain(db, 'lib', 1, 500, undefined, {}, events, beside)).eventsPerSecond,
          log,
        )
      : undefined;
    await dropTables(db, r, TABLE);
    await r.close();
    results[db] = {
      enqueue: e,
      drain: d,
      latency: l,
      latencyRedis: lr,
      slowHandler: s,
      bounds: b,
      memory: m,
      claimCost: c,
      operations: o,
      ordered: ord,
      observability: obs,
      transactional: tr,
      inbox,
      admin,
    };
  }
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  if (SECTIONS.has('idle-tx')) {
    const md = idleTxReport(
      idleTx,
      IDLE_TX_SIZES,
      String(results.machine),
      String(results.date),
      dbs.includes('sqlite'),
    );
    const json = { machine: results.machine, date: results.date, sizes: IDLE_TX_SIZES, ...idleTx };
    writeFileSync(join(ROOT, 'bench/results/idle-transaction.json'), `${JSON.stringify(json, null, 2)}\n`);
    writeFileSync(join(ROOT, 'bench/results/idle-transaction.md'), md);
    process.stdout.write(md);
  }
  // A run of idle-tx alone must not replace the other sections' figures with an empty table.
  if (!LATEST_SECTIONS.some((section) => SECTIONS.has(section))) return;
  const md =
    report(results, dbs) +
    orderedReport(results, dbs) +
    observabilityReport(results, dbs) +
    transactionalReport(results, dbs) +
    inboxReport(results, dbs) +
    adminReport(results, dbs);
  writeFileSync(join(ROOT, 'bench/results/latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(ROOT, 'bench/results/latest.md'), md);
  process.stdout.write(md);
}

type R = {
  enqueue?: Awaited<ReturnType<typeof enqueue>>;
  drain: Record<string, number>;
  latency?: Awaited<ReturnType<typeof latency>>;
  latencyRedis?: Awaited<ReturnType<typeof latency>>;
  slowHandler?: { without: Awaited<ReturnType<typeof latency>>; with: Awaited<ReturnType<typeof latency>> };
  bounds?: BoundsResult[];
  memory?: Awaited<ReturnType<typeof memory>>;
  claimCost?: Awaited<ReturnType<typeof claimCost>>;
  operations?: OperationsResult;
  observability?: ObservabilityResult;
};

function report(results: Record<string, unknown>, dbs: Db[]): string {
  const { machine, date, drainRounds, notes } = results as {
    machine: string;
    date: string;
    drainRounds?: number;
    notes?: string[];
  };
  const f = (n: number, digits = 0) =>
    Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '—';
  const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
  const lines = [
    `Machine: ${machine}. ${date}. Drain: ${f(SIZES.drainEvents)} events, no-op handler${drainRounds ? `, medians of ${drainRounds} interleaved rounds` : ', one round'}.`,
    // Remarks added to latest.json by hand, e.g. a section re-run alone after the full run.
    ...(notes ?? []).flatMap((note) => ['', note]),
    '',
    `Enqueue: medians of ${ENQUEUE_ROUNDS} interleaved rounds of ${SIZES.enqueueSeconds} s per variant.`,
    '',
    "Baselines in the same run: raw SQL does the library's work on the library's schema; the minimal relay",
    '(bench/relay.ts) does the least any relay can, on a narrow table of its own (no leases, attempts or fencing);',
    'on PostgreSQL the leased relay (bench/lease-relay.ts) adds a lease, an attempt and a retry time at claim, a',
    'processed time at acknowledgement, and awaits an async handler per event (no fencing token).',
    '',
    '| database | measure | minimal relay | leased relay | raw SQL | library | library / relay | library / leased relay | library / raw | target |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
  ];
  for (const db of dbs) {
    const r = results[db] as R;
    const e = r.enqueue;
    // The outbox may cost a business transaction at most 0.05 more than the minimal relay's insert does.
    const enqueueOk = e ? e.libRatio >= e.relayRatio - 0.05 : false;
    if (e) {
      lines.push(
        `| ${db} | enqueue, business only (tx/s, 4 clients) | | | ${f(e.rawBusiness)} | ${f(e.libBusiness)} | | | ${f(e.libBusiness / e.rawBusiness, 2)} | |`,
        `| ${db} | enqueue, business + event (tx/s) | ${f(e.relayOutbox)} | | ${f(e.rawOutbox)} | ${f(e.libOutbox)} | ` +
          `${f(e.libOutbox / e.relayOutbox, 2)} | | ${f(e.libOutbox / e.rawOutbox, 2)} | ` +
          `with/without: relay ${f(e.relayRatio, 2)}, raw ${f(e.rawRatio, 2)}, library ${f(e.libRatio, 2)}` +
          (e.libQuietRatio === undefined ? '' : ` (${f(e.libQuietRatio, 2)} without its wake-up)`) +
          ` — ${verdict(enqueueOk)} (at most 0.05 below the relay's); library within 0.1 of raw: ` +
          `${verdict(e.rawRatio - e.libRatio < 0.1)}` +
          ' |',
      );
    }
    for (const key of Object.keys(r.drain).filter((k) => k.startsWith('raw_'))) {
      const config = key.slice(4);
      const lib = r.drain[`lib_${config}`];
      const relay = r.drain[`relay_${config}`];
      // Absent on MariaDB and SQLite, and from runs before it: an empty cell, no verdict.
      const leased = r.drain[`lease-relay_${config}`] as number | undefined;
      const leaseRatio = leased === undefined ? undefined : lib / leased;
      const ratio = lib / r.drain[key];
      const target =
        db === 'postgres'
          ? config === '4w_b500'
            ? 0.7
            : undefined
          : config.endsWith('b500') && (db === 'sqlite' || config.startsWith('4w'))
            ? 0.6
            : undefined;
      const relayTarget = RELAY_TARGETS[db]?.[config];
      const leaseTarget = LEASE_RELAY_TARGETS[db]?.[config];
      const targets = [
        relayTarget ? `≥ ${relayTarget} of relay: ${verdict(lib / relay >= relayTarget)}` : '',
        leaseTarget && leaseRatio !== undefined
          ? `≥ ${leaseTarget} of leased relay: ${verdict(leaseRatio >= leaseTarget)}`
          : '',
        target ? `≥ ${target} of raw: ${verdict(ratio >= target)}` : '',
      ];
      const cell = (n: number | undefined, digits = 0) => (n === undefined ? '' : f(n, digits));
      lines.push(
        `| ${db} | drain ${config.replace('w_b', ' worker(s), batch ')} (events/s) | ${f(relay)} | ${cell(leased)} | ${f(r.drain[key])} | ${f(lib)} | ` +
          `${f(lib / relay, 2)} | ${cell(leaseRatio, 2)} | ${f(ratio, 2)} | ${targets.filter(Boolean).join('; ')} |`,
      );
    }
  }
  lines.push(
    '',
    '| database | measure | raw SQL | library | library / raw | target |',
    '| --- | --- | ---: | ---: | ---: | --- |',
  );
  for (const db of dbs) {
    const r = results[db] as R;
    const latencyRow = (l: NonNullable<R['latency']>, how: string, target: string) =>
      `| ${db} | commit → handler in another instance, ${how}, p50 / p95 / p99 (ms) | | ${f(l.p50)} / ${f(l.p95)} / ${f(l.p99)} (${l.received}/${l.events}) | | ${target} |`;
    if (r.latency) {
      const l = r.latency;
      if (db === 'postgres') lines.push(latencyRow(l, 'LISTEN/NOTIFY', `p99 ≤ 10: ${verdict(l.p99 <= 10)}`));
      else if (db === 'sqlite') lines.push(latencyRow(l, 'file watch', 'no target'));
      else lines.push(latencyRow(l, 'polling (1 s)', 'no wake-up of its own'));
    }
    if (r.latencyRedis) {
      const l = r.latencyRedis;
      lines.push(
        latencyRow(
          l,
          'ClientProxyWakeUp (Redis)',
          db === 'mariadb' ? `p99 ≤ 10: ${verdict(l.p99 <= 10)}` : 'no target',
        ),
      );
    }
    if (r.slowHandler) {
      const { without, with: slow } = r.slowHandler;
      const how = db === 'postgres' ? 'LISTEN/NOTIFY' : db === 'sqlite' ? 'file watch' : 'polling (1 s)';
      const ps = (l: typeof slow) => `${f(l.p50)} / ${f(l.p95)} / ${f(l.p99)} (${l.received}/${l.events})`;
      lines.push(
        `| ${db} | commit → handler, ${f(slow.events)} events at ${f(slow.ratePerSecond)}/s, ${how}, while a ` +
          `${SLOW_HANDLER_MS / 1000} s handler runs on the same instance, p50 / p95 / p99 (ms) | without it: ${ps(without)} | ` +
          `${ps(slow)} | ${f(slow.p99 / without.p99, 2)} (p99) | p99 ≤ 2× without: ${verdict(slow.p99 <= 2 * without.p99)} |`,
      );
    }
    if (r.bounds) {
      const [without, ...runs] = r.bounds;
      const ps = (l: BoundsResult) => `${f(l.p50)} / ${f(l.p95)} / ${f(l.p99)} (${l.received}/${l.expected})`;
      for (const run of runs) {
        const bound = run.variant === 'two' ? '`{ concurrency: 2 }`' : `the default bound (${run.slowBound})`;
        const within = run.slowMaxRunning <= (run.slowBound ?? 0);
        lines.push(
          `| ${db} | commit → fast targets (2 handlers, a webhook), ${f(run.events)} events at ${f(run.ratePerSecond)}/s on 2 topics, ` +
            `while a ${BOUNDS.slowMs / 1000} s handler with ${bound} shares one of them, p50 / p95 / p99 (ms) | without it: ${ps(without)} | ` +
            `${ps(run)}; slow handler at most ${run.slowMaxRunning} at once (${run.slowCalls} calls) | ${f(run.p99 / without.p99, 2)} (p99) | ` +
            `p99 ≤ 2× without: ${verdict(run.p99 <= 2 * without.p99)}; within its bound: ${verdict(within)} |`,
        );
      }
    }
    if (r.memory) {
      const { raw: base, libDefault, lib500 } = r.memory;
      const rss = (m: typeof base) =>
        `${f(m.rssBeforeMb)} → ${f(m.rssAfterMb)} (heap ${f(m.heapBeforeMb)} → ${f(m.heapAfterMb)})`;
      lines.push(
        `| ${db} | RSS draining ${f(libDefault.events)} events, default batch ${libDefault.batch} (MB) | ${rss(base)} at batch 500 | ${rss(libDefault)} | | growth ≤ 50: ${verdict(libDefault.growthMb <= 50)} (${f(libDefault.growthMb, 1)}) |`,
        `| ${db} | RSS draining ${f(lib500.events)} events, batch 500 (MB) | ${rss(base)} | ${rss(lib500)} | | growth ${f(lib500.growthMb, 1)}, no target: see docs/internals/benchmark.md (Memory) |`,
      );
    }
    if (r.claimCost) {
      const c = r.claimCost;
      lines.push(
        `| ${db} | claim of 500, 10,000 pending: empty vs ${f(SIZES.history)} delivered kept (ms) | | ${f(c.emptyMs, 1)} vs ${f(c.historyMs, 1)} | ${f(c.ratio, 2)} | ≤ 2: ${verdict(c.ratio <= 2)} |`,
      );
    }
    if (r.operations) lines.push(...operationsRows(db, r.operations, OPERATIONS_SIZES, f));
  }
  return `${lines.join('\n')}\n`;
}

main().catch((error: unknown) => {
  log(error instanceof Error && error.stack ? error.stack : String(error));
  process.exit(1);
});
