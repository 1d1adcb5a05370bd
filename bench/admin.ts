/**
 * The admin page (issue 40): what its JSON API costs, read over HTTP as an open page reads it.
 * (a) `GET <path>/api/v1/overview` on a table of 1,000,000 rows shaped like a week of traffic: a cache miss
 *     (the stats read that every open page of the process shares, once per `refreshMs`) and a cache hit;
 * (b) what 10 pages polling the overview at the default `refreshMs` cost: the machine's CPU they take on that
 *     table (windows with and without them, interleaved) over the CPU the library's drain keeps busy; and the
 *     drain itself (1 worker × batch 500, in a process of its own) beside the idle app and beside the pages.
 * For (a) the app runs in the bench's process with `refreshMs: 1000`, the least the module takes, so that a
 * miss can be timed every second.
 */
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { createOutboxAdminMigrations, OutboxAdminModule, OutboxModule } from '../lib';
import { benchModule, percentile, type Db } from './env';
import { median } from './median';
import { createTables, fill, raw, type Raw } from './raw';

export interface AdminSizes {
  /** Rows of the overview's table: a week of traffic. */
  rows: number;
  /** Cache misses timed, each a request made just over `refreshMs` after the last read ended. */
  samples: number;
  /** Events of each drain. */
  drainEvents: number;
  /** Drains of each variant (without and with the pages), interleaved. */
  rounds: number;
  /** CPU windows of each variant (no page open, the pages polling), interleaved, and their length (s). */
  cpuWindows: number;
  cpuWindowSeconds: number;
}

export interface AdminResult {
  overview: {
    rows: number;
    /** Cache misses: the stats read and the request around it (ms). */
    missMs: number[];
    missMedianMs: number;
    missP95Ms: number;
    /** Cache hits: requests served from the shared stats (ms). */
    hitMedianMs: number;
    hits: number;
    /** What the overview said of the table (its last miss). */
    shape: { due: number; scheduled: number; inFlight: number; dead: number; delivered: number; exact: boolean };
    badges: string[];
  };
  /**
   * The pages' CPU on the week's table: the busy cores of the processes they use (the app with its page
   * clients, the database server) in windows with the 10 pages polling and in windows with none, each window's.
   */
  pagesCpu: {
    windowSeconds: number;
    idleCores: number[];
    pagesCores: number[];
    /** Median with pages − median without: the cores the pages keep busy. */
    cores: number;
  };
  drain: {
    events: number;
    rounds: number;
    pages: number;
    /** Events per second, each round's, in the order they ran within their variant. */
    withoutRounds: number[];
    withRounds: number[];
    without: number;
    with: number;
    /** 1 − with / without. */
    cost: number;
    /** The machine's busy cores while the drain ran without pages, each round's, and their median. */
    drainCoresRounds: number[];
    drainCores: number;
    /**
     * What the pages asked over every round with them, from their opening (a period before the drain) to
     * the drain's end: requests, failed ones, the distinct stats reads they were answered from.
     */
    overviewRequests: number;
    failedRequests: number;
    statsReads: number;
    openSeconds: number;
  };
}

/**
 * One drain of `events` filled events by the library (1 worker × batch 500, bench/child.ts lib-drain, as
 * the drain section runs it), in events per second; `beside` is started once the worker is ready and
 * stopped when the timed drain ends.
 */
export type AdminDrain = (events: number, beside: () => Promise<() => Promise<void>>) => Promise<number>;

const TABLE = 'bench_outbox';
const AUDIT = `${TABLE}_audit`;
const MIGRATIONS = `${TABLE}_admin_migrations`;
const PATH = 'admin/outbox';
const REFRESH_MS = 1000;
/**
 * What the open pages of (b) poll at: the module's default `refreshMs`, which a page follows (it asks for
 * the overview once per period while it is shown; the other views refresh when the user asks).
 */
const PAGE_REFRESH_MS = 5000;
/** Open pages, and the cache hits timed after each miss. */
const PAGES = 10;
const HITS_PER_MISS = 3;
/** The overview's target (issue 40), in ms, and the most the pages may cost the drain. */
const OVERVIEW_TARGET_MS = 100;
const MAX_COST = 0.02;
/** The open events of the week's table (in flight: claimed now, leased for 5 minutes); the rest delivered, DEAD of them dead. */
const OPEN = { due: 1_300, scheduled: 500, inFlight: 200 };
const DEAD = 300;
/** Delivered rows as a week of retention keeps them: processed over the last 7 days (as the operations section's). */
const WEEK_MS = 7 * 24 * 3_600_000;

const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The machine's CPU time so far, busy and in all, in clock ticks (/proc/stat's first line). */
function machineCpu(): { busy: number; total: number } {
  const [, ...fields] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/);
  // user nice system idle iowait irq softirq steal (guest time is counted in user already).
  const ticks = fields.slice(0, 8).map(Number);
  const total = ticks.reduce((sum, t) => sum + t, 0);
  return { busy: total - ticks[3] - ticks[4], total };
}

/** The busy cores of the machine from `since` to now: busy ticks over all ticks, times the cores. */
function busyCores(since: { busy: number; total: number }, cores: number): number {
  const now = machineCpu();
  return ((now.busy - since.busy) / (now.total - since.total)) * cores;
}

/** The kernel's clock ticks per second, in which /proc counts a process's CPU time. */
const TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** The database server's processes by name (SQLite has none: it runs in the app's process). */
const SERVER_PROCESS: Partial<Record<Db, string>> = { postgres: 'postgres', mariadb: 'mariadbd' };

/** CPU time so far of the processes the open pages use: this one's (seconds), the database server's (ticks by pid). */
interface PagesCpu {
  self: number;
  servers: Map<string, number>;
}

/**
 * The CPU so far of the processes the open pages use: this one (the app serving them and the pages'
 * clients) and the database server's (every process of that name: PostgreSQL's backends and workers).
 */
function pagesProcessesCpu(db: Db): PagesCpu {
  const { user, system } = process.cpuUsage();
  const servers = new Map<string, number>();
  const name = SERVER_PROCESS[db];
  if (name) {
    for (const pid of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        // "pid (comm) state ppid …": utime and stime are the 14th and 15th fields, the 12th and 13th after comm.
        const close = stat.lastIndexOf(')');
        if (stat.slice(stat.indexOf('(') + 1, close) !== name) continue;
        const fields = stat.slice(close + 2).split(' ');
        servers.set(pid, Number(fields[11]) + Number(fields[12]));
      } catch {
        // Gone between the listing and the read.
      }
    }
  }
  return { self: (user + system) / 1e6, servers };
}

/**
 * CPU seconds spent from `since` to `now`: a server process's growth, the whole time of one started
 * since; one that ended between the two reads is not counted (an autovacuum worker's: the app's
 * connections stay open).
 */
function cpuSpent(since: PagesCpu, now: PagesCpu): number {
  let ticks = 0;
  for (const [pid, t] of now.servers) ticks += t - (since.servers.get(pid) ?? 0);
  return now.self - since.self + ticks / TICKS_PER_SECOND;
}

/** The database's clock `seconds` from now, in the column's form. */
function fromNow(db: Db, seconds: number): string {
  if (db === 'postgres') return `now() + interval '${seconds} seconds'`;
  if (db === 'mariadb') return `UTC_TIMESTAMP(6) + INTERVAL ${seconds} SECOND`;
  return `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '${seconds >= 0 ? '+' : ''}${seconds} seconds')`;
}

/**
 * The table as a week of traffic leaves it: the fill of the operations section's stats() (bench/raw.ts
 * `fill`: delivered rows spread over 7 days, then pending ones; some delivered made dead), then its pending
 * rows split into due, scheduled (due in an hour) and in flight (claimed now, leased for 5 minutes), and
 * the last hour's deliveries given their claim time (what the overview's last claim reads).
 */
async function weekOfTraffic(db: Db, r: Raw, rows: number): Promise<void> {
  const c = (name: string) => q(db, name);
  const t = c(TABLE);
  const open = OPEN.due + OPEN.scheduled + OPEN.inFlight;
  await createTables(db, r, TABLE);
  await fill(db, r, TABLE, rows - open, 'delivered', WEEK_MS);
  await fill(db, r, TABLE, open, 'pending');
  // MariaDB reads the updated table in a subquery only through a derived table.
  const some = (n: number, where: string) =>
    `${c('id')} IN (SELECT ${c('id')} FROM (SELECT ${c('id')} FROM ${t} WHERE ${where} LIMIT ${n}) AS x)`;
  const due = `${c('status')} = 'pending' AND ${c('claim_token')} IS NULL AND ${c('available_at')} <= ${fromNow(db, 0)}`;
  await r.query(
    `UPDATE ${t} SET ${c('status')} = 'dead', ${c('last_error')} = 'boom', ${c('attempts')} = 10 WHERE ${some(DEAD, `${c('status')} = 'delivered'`)}`,
  );
  await r.query(`UPDATE ${t} SET ${c('available_at')} = ${fromNow(db, 3600)} WHERE ${some(OPEN.scheduled, due)}`);
  await r.query(
    `UPDATE ${t} SET ${c('claim_token')} = ${db === 'postgres' ? '$1' : '?'}, ${c('attempts')} = 1, ` +
      `${c('claimed_at')} = ${fromNow(db, 0)}, ${c('available_at')} = ${fromNow(db, 300)} WHERE ${some(OPEN.inFlight, due)}`,
    [randomUUID()],
  );
  await r.query(
    `UPDATE ${t} SET ${c('claimed_at')} = ${c('processed_at')} WHERE ${c('status')} = 'delivered' AND ${c('processed_at')} >= ${fromNow(db, -3600)}`,
  );
}

/**
 * The web replica: the outbox (its worker off: the drain is the worker replica's) and the admin page with
 * its audit table migrated, serving HTTP on a free port of 127.0.0.1; the API's base URL.
 */
async function adminApp(db: Db, refreshMs = REFRESH_MS): Promise<{ app: INestApplication; api: string }> {
  const module = benchModule(
    db,
    TABLE,
    [
      OutboxModule.forRoot({ tableName: TABLE, worker: { enabled: false } }),
      OutboxAdminModule.forRoot({
        path: PATH,
        unsafeAllowAnonymous: true,
        refreshMs,
        auditTableName: AUDIT,
      }),
    ],
    10,
    [],
    { migrations: createOutboxAdminMigrations(AUDIT), migrationsRun: true, migrationsTableName: MIGRATIONS },
  );
  const app = await NestFactory.create(module, { logger: ['error', 'warn'] });
  await app.listen(0, '127.0.0.1');
  const { port } = (app.getHttpServer() as Server).address() as AddressInfo;
  return { app, api: `http://127.0.0.1:${port}/${PATH}/api/v1` };
}

interface Overview {
  stats: {
    at: string;
    due: number;
    scheduled: number;
    inFlight: number;
    dead: number;
    delivered: number;
    deliveredExact: boolean;
  };
  badges: Array<{ kind: string; count: number }>;
}

/** A GET as a page makes it: from the request to the parsed answer (ms). */
async function get<T>(url: string): Promise<{ ms: number; body: T }> {
  const started = performance.now();
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: ${response.status} ${(await response.text()).slice(0, 300)}`);
  const body = (await response.json()) as T;
  return { ms: performance.now() - started, body };
}

async function dropAdminTables(db: Db): Promise<void> {
  const r = await raw(db, 1);
  await r.query(`DROP TABLE IF EXISTS ${q(db, AUDIT)}`);
  await r.query(`DROP TABLE IF EXISTS ${q(db, MIGRATIONS)}`);
  await r.close();
}

/** (a) The overview over HTTP on a week's table: `samples` cache misses, and `HITS_PER_MISS` hits after each. */
async function overviewLatency(db: Db, sizes: AdminSizes): Promise<AdminResult['overview']> {
  const r = await raw(db, 2);
  await weekOfTraffic(db, r, sizes.rows);
  await r.close();
  const { app, api } = await adminApp(db);
  try {
    const url = `${api}/overview`;
    // Untimed: the app's first read (its connections, the statements' first plans).
    let last = (await get<Overview>(url)).body;
    const shape = last.stats;
    const expected = { due: OPEN.due, scheduled: OPEN.scheduled, inFlight: OPEN.inFlight, dead: DEAD };
    for (const [field, count] of Object.entries(expected)) {
      if (shape[field as keyof typeof expected] !== count) {
        throw new Error(
          `${db} admin: the overview counts ${JSON.stringify(shape)}, expected ${JSON.stringify(expected)}`,
        );
      }
    }
    let lastEnded = performance.now();
    const misses: number[] = [];
    const hits: number[] = [];
    while (misses.length < sizes.samples) {
      // Just over refreshMs after the last read ended, hence after the server took its time: a miss —
      // checked by the read's own clock, which a hit repeats.
      await sleep(lastEnded + REFRESH_MS + 20 - performance.now());
      const miss = await get<Overview>(url);
      lastEnded = performance.now();
      if (miss.body.stats.at === last.stats.at) throw new Error(`${db} admin: a request after refreshMs hit the cache`);
      last = miss.body;
      misses.push(miss.ms);
      for (let i = 0; i < HITS_PER_MISS; i++) {
        const hit = await get<Overview>(url);
        // A miss slower than refreshMs leaves no time for a hit: not counted.
        if (hit.body.stats.at === last.stats.at) hits.push(hit.ms);
      }
    }
    const sorted = [...misses].sort((a, b) => a - b);
    const s = last.stats;
    return {
      rows: sizes.rows,
      missMs: misses,
      missMedianMs: median(misses),
      missP95Ms: percentile(sorted, 95),
      hitMedianMs: median(hits),
      hits: hits.length,
      shape: {
        due: s.due,
        scheduled: s.scheduled,
        inFlight: s.inFlight,
        dead: s.dead,
        delivered: s.delivered,
        exact: s.deliveredExact,
      },
      badges: last.badges.map((b) => `${b.kind} ${b.count}`),
    };
  } finally {
    await app.close();
  }
}

/** What open pages asked: overviews answered, failed requests (the first one's message), stats reads, time open (ms). */
interface Asked {
  overview: number;
  failed: number;
  firstFailure?: string;
  reads: Set<string>;
  ms: number;
}

const newAsked = (): Asked => ({ overview: 0, failed: 0, reads: new Set<string>(), ms: 0 });

/**
 * `PAGES` pages, each asking for the overview every `PAGE_REFRESH_MS` (the module's default refreshMs,
 * which the page follows), as an open overview does; they open spread over one period, and this resolves
 * after that period (so all are polling) with what closes them.
 */
async function openPages(api: string, asked: Asked): Promise<() => Promise<void>> {
  let stopped = false;
  let stop!: () => void;
  const stopping = new Promise<void>((resolve) => (stop = resolve));
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, ms));
      void stopping.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  const failed = (error: unknown) => {
    asked.failed++;
    asked.firstFailure ??= error instanceof Error ? error.message : String(error);
  };
  const page = async (i: number) => {
    await pause((i * PAGE_REFRESH_MS) / PAGES);
    while (!stopped) {
      const next = performance.now() + PAGE_REFRESH_MS;
      await get<Overview>(`${api}/overview`).then(({ body }) => {
        asked.overview++;
        asked.reads.add(body.stats.at);
      }, failed);
      await pause(next - performance.now());
    }
  };
  const opened = performance.now();
  const pages = Array.from({ length: PAGES }, (_, i) => page(i));
  await sleep(PAGE_REFRESH_MS);
  return async () => {
    stopped = true;
    stop();
    await Promise.all(pages);
    asked.ms += performance.now() - opened;
  };
}

/**
 * (b) The pages' CPU on the week's table (left by (a)): the busy cores of the processes they use — this
 * one (the app, and the pages' clients, which a browser elsewhere would run) and the database server's —
 * over windows with `PAGES` pages polling at the default refreshMs and windows with none, interleaved
 * (each pair starting one variant later), after a period for the pages to open; per process, so that the
 * machine's other services (brokers idling on it) stay out of the figure. What they cost a drain is at
 * most these cores over the cores the drain keeps busy: a drain that saturates the machine loses that
 * share of it, one that leaves a core idle less.
 */
async function pagesCpu(db: Db, sizes: AdminSizes): Promise<AdminResult['pagesCpu']> {
  if (db === 'postgres') {
    // The fill's dead tuples and statistics settled now, not by an autovacuum inside a window.
    const r = await raw(db, 1);
    await r.query(`VACUUM ANALYZE ${q(db, TABLE)}`);
    await r.close();
  }
  const { app, api } = await adminApp(db, PAGE_REFRESH_MS);
  const asked = newAsked();
  const windows = { idle: [] as number[], pages: [] as number[] };
  const windowMs = sizes.cpuWindowSeconds * 1000;
  try {
    await get<Overview>(`${api}/overview`);
    for (let round = 0; round < sizes.cpuWindows; round++) {
      const order = round % 2 === 0 ? (['idle', 'pages'] as const) : (['pages', 'idle'] as const);
      for (const variant of order) {
        const close = variant === 'pages' ? await openPages(api, asked) : undefined;
        if (!close) await sleep(PAGE_REFRESH_MS);
        const since = { cpu: pagesProcessesCpu(db), at: performance.now() };
        await sleep(windowMs);
        const spent = cpuSpent(since.cpu, pagesProcessesCpu(db));
        windows[variant].push(spent / ((performance.now() - since.at) / 1000));
        await close?.();
      }
    }
  } finally {
    await app.close();
  }
  if (asked.failed > 0) throw new Error(`${db} admin: ${asked.failed} overviews failed (first: ${asked.firstFailure})`);
  return {
    windowSeconds: sizes.cpuWindowSeconds,
    idleCores: windows.idle,
    pagesCores: windows.pages,
    cores: median(windows.pages) - median(windows.idle),
  };
}

/**
 * (b) The drain without and with `PAGES` open pages. The app serving the page is a web replica in this
 * process and the worker another process (bench/child.ts), as in production, where a web replica and a
 * worker replica share the database: what the pages cost the drain goes through the database (and, on
 * this 2-core machine, its CPU), not through the worker's event loop — which a page in the worker's own
 * process would also load, an arrangement production avoids. The app stays up through every round of both
 * variants: "without" is the same app with no page open (`openPages`; the drain starts once all poll); in
 * the rounds without, after the same wait, the machine's busy cores are read across the drain. The rounds
 * spread more than the pages can cost (a few reads on a table the drain fills): reported beside (b)'s
 * CPU share, which is the verdict.
 */
async function pollingCost(
  db: Db,
  sizes: AdminSizes,
  drainOnce: AdminDrain,
  log: (line: string) => void,
): Promise<AdminResult['drain']> {
  const r = await raw(db, 1);
  await createTables(db, r, TABLE);
  await r.close();
  const { app, api } = await adminApp(db, PAGE_REFRESH_MS);
  const asked = newAsked();
  const cores = availableParallelism();
  const drainCores: number[] = [];
  // The rounds without: the same wait as the pages' opening, then the machine's CPU while the drain runs.
  const idle = async () => {
    await sleep(PAGE_REFRESH_MS);
    const since = machineCpu();
    return () => {
      drainCores.push(busyCores(since, cores));
      return Promise.resolve();
    };
  };
  const open = () => openPages(api, asked);
  const samples = { without: [] as number[], with: [] as number[] };
  try {
    for (let round = 0; round < sizes.rounds; round++) {
      // Each round starts one variant later: neither always runs first.
      const order = round % 2 === 0 ? (['without', 'with'] as const) : (['with', 'without'] as const);
      for (const variant of order) {
        samples[variant].push(await drainOnce(sizes.drainEvents, variant === 'with' ? open : idle));
      }
    }
  } finally {
    await app.close();
  }
  const list = (xs: number[]) => xs.map(Math.round).join(', ');
  log(`   admin: drain without pages ${list(samples.without)}/s, with ${PAGES} pages ${list(samples.with)}/s`);
  log(
    `   admin: ${asked.overview} overviews (${asked.reads.size} stats reads), ` +
      `${asked.failed} failed${asked.firstFailure ? ` (first: ${asked.firstFailure})` : ''}`,
  );
  const without = median(samples.without);
  const withPages = median(samples.with);
  return {
    events: sizes.drainEvents,
    rounds: sizes.rounds,
    pages: PAGES,
    withoutRounds: samples.without,
    withRounds: samples.with,
    without,
    with: withPages,
    cost: 1 - withPages / without,
    drainCoresRounds: drainCores,
    drainCores: median(drainCores),
    overviewRequests: asked.overview,
    failedRequests: asked.failed,
    statsReads: asked.reads.size,
    openSeconds: asked.ms / 1000,
  };
}

export async function adminBench(
  db: Db,
  sizes: AdminSizes,
  drainOnce: AdminDrain,
  log: (line: string) => void,
): Promise<AdminResult> {
  await dropAdminTables(db);
  try {
    log(`— ${db}: admin overview on ${sizes.rows.toLocaleString('en')} rows`);
    const overview = await overviewLatency(db, sizes);
    log(
      `   admin: overview miss median ${overview.missMedianMs.toFixed(1)} ms, p95 ${overview.missP95Ms.toFixed(1)} ms ` +
        `(${overview.missMs.map((ms) => ms.toFixed(0)).join(', ')}); hit median ${overview.hitMedianMs.toFixed(1)} ms`,
    );
    log(`— ${db}: admin pages' CPU on ${sizes.rows.toLocaleString('en')} rows`);
    const cpu = await pagesCpu(db, sizes);
    const list = (xs: number[]) => xs.map((x) => x.toFixed(3)).join(', ');
    log(`   admin: busy cores without pages ${list(cpu.idleCores)}, with ${PAGES} pages ${list(cpu.pagesCores)}`);
    log(`— ${db}: admin pages polling during the drain`);
    const drain = await pollingCost(db, sizes, drainOnce, log);
    log(
      `   admin: drain's busy cores ${list(drain.drainCoresRounds)}; pages' share ${((cpu.cores / drain.drainCores) * 100).toFixed(2)}%`,
    );
    return { overview, pagesCpu: cpu, drain };
  } finally {
    await dropAdminTables(db);
  }
}

export function adminReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '—';
  const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
  const rows: string[] = [];
  let sized: AdminResult | undefined;
  for (const db of dbs) {
    const a = (results[db] as { admin?: AdminResult } | undefined)?.admin;
    if (!a) continue;
    sized ??= a;
    const o = a.overview;
    const d = a.drain;
    const share = a.pagesCpu.cores / d.drainCores;
    const shape = `${f(o.shape.due)} due, ${f(o.shape.scheduled)} scheduled, ${f(o.shape.inFlight)} in flight, ${f(o.shape.dead)} dead, ${f(o.shape.delivered)} delivered${o.shape.exact ? '' : ' (estimated)'}`;
    rows.push(
      `| ${db} | overview on ${f(o.rows)} rows, cache miss (the shared stats read), median / p95 of ${o.missMs.length} (ms) | ` +
        `${f(o.missMedianMs, 1)} / ${f(o.missP95Ms, 1)} (${shape}) | median < ${OVERVIEW_TARGET_MS}: ${verdict(o.missMedianMs < OVERVIEW_TARGET_MS)} |`,
      `| ${db} | overview, cache hit, median of ${o.hits} (ms) | ${f(o.hitMedianMs, 1)} | reported |`,
      `| ${db} | ${d.pages} pages polling: the busy cores of the app's and the database's processes with them − without (median of ${a.pagesCpu.pagesCores.length} windows of ${a.pagesCpu.windowSeconds} s each) ` +
        `over the drain's busy cores (median of ${d.drainCoresRounds.length}) | ` +
        `${f(a.pagesCpu.cores, 3)} / ${f(d.drainCores, 2)} = ${f(share * 100, 2)}% | < ${MAX_COST * 100}%: ${verdict(share < MAX_COST)} |`,
      `| ${db} | drain 1 worker × 500 (events/s): no page open vs ${d.pages} pages polling | ` +
        `${f(d.without)} vs ${f(d.with)}: ${f(d.cost * 100, 1)}%, rounds ${f(Math.min(...d.withoutRounds))}–${f(Math.max(...d.withoutRounds))} vs ${f(Math.min(...d.withRounds))}–${f(Math.max(...d.withRounds))} ` +
        `(${f(d.overviewRequests)} overviews on ${f(d.statsReads)} stats reads, in ${f(d.openSeconds, 1)} s open${d.failedRequests ? `; ${f(d.failedRequests)} failed` : ''}) | ` +
        `reported: the rounds spread wider than the target |`,
    );
  }
  if (!sized) return '';
  const { drain } = sized;
  return [
    '',
    `Admin page (issue 40): \`GET /${PATH}/api/v1/overview\` over HTTP (global fetch, keep-alive) from the process of the app,`,
    `which serves it on 127.0.0.1 with \`refreshMs: ${REFRESH_MS}\`, on a table shaped like a week of traffic (the operations section's`,
    `fill: delivered rows over 7 days, then ${f(OPEN.due)} due, ${f(OPEN.scheduled)} scheduled and ${f(OPEN.inFlight)} in flight, ${DEAD} dead). A miss is a request`,
    'made just over refreshMs after the last read ended — the stats read that every open page of the process shares,',
    `each checked to carry a new one; after each, ${HITS_PER_MISS} requests served from it (hits). The drain: the library, 1 worker × batch 500`,
    `in a process of its own (a worker replica), ${f(drain.events)} events, beside the app (a web replica, its worker off) with no page`,
    `open and with ${drain.pages} pages each asking for the overview every ${PAGE_REFRESH_MS} ms (the default refreshMs, served by an app`,
    `with that refreshMs; a page polls only the overview); medians of ${drain.rounds}`,
    'interleaved rounds of each (each round starting one variant later). Those rounds spread wider than 2%, so the',
    "verdict is the pages' CPU: the busy cores of the processes they use (/proc: the app's, with the pages' clients,",
    `which a browser would run elsewhere, and the database server's) in ${sized.pagesCpu.windowSeconds} s windows with the pages polling the week's table`,
    "and without, interleaved, over the machine's busy cores while the drain ran without pages (/proc/stat) — the share",
    "of the drain's work the pages take from a drain that keeps the machine busy.",
    '',
    '| database | measure | figure | target |',
    '| --- | --- | --- | --- |',
    ...rows,
    '',
  ].join('\n');
}
