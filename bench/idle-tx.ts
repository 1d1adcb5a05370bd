/**
 * (f) A transaction left open — idle in transaction, or a long report — while events churn. Its
 * snapshot keeps every row version the churn leaves behind (PostgreSQL cannot vacuum them, InnoDB
 * cannot purge them), and the claim walks past them. Measured in phases on one table: before, while
 * the transaction is held on a connection of its own, and after it ends (then after VACUUM on
 * PostgreSQL, after purge has caught up on MariaDB). SQLite keeps no row-version history of this
 * kind: an open reader there holds back the WAL checkpoint, not a vacuum or a purge.
 */
import { loadavg } from 'node:os';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { OutboxService, OutboxWorker } from '../lib';
import { OUTBOX_STORE } from '../lib/outbox.constants';
import type { OutboxStore } from '../lib/store/outbox.store';
import { libraryApp, MARIADB_URL, percentile, PG_URL } from './env';
import { createTables, dropTables, raw, type Raw } from './raw';

export type MvccDb = 'postgres' | 'mariadb';

export interface IdleTxSizes {
  /** Events published and delivered in each phase before and after the transaction. */
  calm: number;
  /** Events published and delivered while the transaction is open. */
  held: number;
  /** Events per round: published in one transaction, then drained. */
  round: number;
}

/** Claims of one batch, timed one after another with nothing else running. */
export interface Probe {
  /** `store.claim`, as the application sees it. */
  p50: number;
  p95: number;
  /** The server's side of the claim's selection (its own SQL, run under EXPLAIN ANALYZE): median. */
  serverMs: number;
  /** Pages it touched: the history it walks past, free of the machine's noise. */
  pages: number;
}

export interface Phase {
  name: string;
  events: number;
  /** At the end of the phase. */
  claim: Probe;
  /** The probes along the phase (each quarter while the transaction is held). */
  trend: Probe[];
  /** Events delivered per second of `drain()`, publishing not counted. */
  drainPerSecond: number;
  /** PostgreSQL: the table's n_dead_tup; MariaDB: InnoDB's History list length (server-wide). */
  history: number;
  /** What happened between the previous phase and this one. */
  note?: string;
}

export interface IdleTxResult {
  phases: Phase[];
  /** How the held transaction showed in the monitoring views at the end of its phase. */
  held: string;
  /** The server's settings that decide the cleaning up. */
  settings: string;
  loadBefore: number[];
  loadAfter: number[];
}

const TABLE = 'bench_idle_outbox';
const BATCH = 50;
const PROBE_CLAIMS = 20;
const SERVER_RUNS = 5;
const PURGE_WAIT_MS = 180_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const ms = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;

/** The parts of MariaDB's `ANALYZE FORMAT=JSON` of the claim's selection that the probe reads. */
interface MariadbAnalyze {
  query_block: {
    r_total_time_ms: number;
    nested_loop?: Array<{ table?: { r_engine_stats?: { pages_accessed?: number } } }>;
  };
}

/** A connection outside every pool that opens a transaction, reads, and then does nothing. */
interface Holder {
  /** What the monitoring views show of it: the proof that it holds the horizon back. */
  describe(): Promise<string>;
  end(): Promise<void>;
}

/** Checks at once that the transaction holds the horizon; ending it commits and closes both connections. */
async function holding(
  holder: { query(sql: string): Promise<unknown>; end(): Promise<void> },
  observer: { end(): Promise<void> },
  describe: () => Promise<string>,
): Promise<Holder> {
  await describe();
  return {
    describe,
    end: async () => {
      await holder.query('COMMIT');
      await Promise.all([holder.end(), observer.end()]);
    },
  };
}

async function holdPostgres(): Promise<Holder> {
  const { Client } = await import('pg');
  const holder = new Client({ connectionString: PG_URL });
  const observer = new Client({ connectionString: PG_URL });
  await Promise.all([holder.connect(), observer.connect()]);
  // A safety net if this process hangs: the server ends the transaction by itself.
  await holder.query(`SET idle_in_transaction_session_timeout = '30min'`);
  // READ COMMITTED drops its snapshot after each statement (backend_xmin goes back to NULL): only a
  // transaction-long snapshot, or a transaction that wrote, holds the horizon.
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query(`SELECT count(*) FROM "${TABLE}_orders"`);
  const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const describe = async () => {
    const { rows } = await observer.query<{ state: string; xmin: string | null; age: number; seconds: string }>(
      `SELECT state, backend_xmin::text AS xmin, age(backend_xmin) AS age, round(extract(epoch FROM now() - xact_start)) AS seconds
       FROM pg_stat_activity WHERE pid = $1`,
      [pid],
    );
    const row = rows[0];
    if (!row?.xmin) throw new Error(`the held transaction holds no snapshot: ${JSON.stringify(row)}`);
    return `pg_stat_activity: ${row.state}, backend_xmin ${row.xmin} (${row.age} transactions old), xact_start ${row.seconds} s ago`;
  };
  return holding(holder, observer, describe);
}

async function holdMariadb(): Promise<Holder> {
  const mysql = await import('mysql2/promise');
  const holder = await mysql.createConnection({ uri: MARIADB_URL });
  const observer = await mysql.createConnection({ uri: MARIADB_URL });
  await holder.query('SET SESSION idle_transaction_timeout = 1800');
  // The read view is taken at the first consistent read and kept to the end at REPEATABLE READ.
  await holder.query('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
  await holder.query('START TRANSACTION');
  await holder.query(`SELECT count(*) FROM \`${TABLE}_orders\``);
  const describe = async () => {
    const [rows] = (await observer.query(
      `SELECT trx_state, TIMESTAMPDIFF(SECOND, trx_started, NOW()) AS seconds FROM information_schema.innodb_trx
       WHERE trx_mysql_thread_id = ?`,
      [holder.threadId],
    )) as unknown as [Array<{ trx_state: string; seconds: number }>];
    if (!rows[0]) throw new Error('the held transaction is not in information_schema.innodb_trx');
    return `information_schema.innodb_trx: ${rows[0].trx_state}, trx_started ${rows[0].seconds} s ago`;
  };
  return holding(holder, observer, describe);
}

async function serverSettings(db: MvccDb, r: Raw): Promise<string> {
  if (db === 'postgres') {
    const { rows } = await r.query(
      `SELECT string_agg(name || ' ' || setting, ', ' ORDER BY name) AS s FROM pg_settings
       WHERE name IN ('autovacuum', 'server_version', 'idle_in_transaction_session_timeout')`,
    );
    return String(rows[0].s);
  }
  const { rows } = await r.query(
    `SELECT CONCAT('version ', VERSION(), ', innodb_purge_threads ', @@innodb_purge_threads, ', innodb_max_purge_lag ', @@innodb_max_purge_lag) AS s`,
  );
  return String(rows[0].s);
}

export async function idleTransaction(
  db: MvccDb,
  sizes: IdleTxSizes,
  log: (line: string) => void,
): Promise<IdleTxResult> {
  const loadBefore = loadavg();
  const r = await raw(db, 1);
  await createTables(db, r, TABLE);
  const app = await libraryApp(db, TABLE, { worker: { enabled: false, batchSize: BATCH } }, 4);
  const store = app.get<OutboxStore>(OUTBOX_STORE);
  const worker = app.get(OutboxWorker);
  const outbox = app.get(OutboxService);
  const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);

  const publish = (n: number) =>
    tx.withTransaction(() =>
      outbox.publishMany(Array.from({ length: n }, (_, i) => ({ topic: 'bench.event', payload: { i } }))),
    );

  // As the claim section does: the store's claim alone, each batch acknowledged untimed after it.
  const probe = async (): Promise<Probe> => {
    await publish(PROBE_CLAIMS * BATCH);
    // Locks the first batch and lets it go again: the timed claims below still find every event.
    const selection = store.dialect.claimSelection(store.table, BATCH);
    const server: Array<{ ms: number; pages: number }> = [];
    for (let i = 0; i < SERVER_RUNS; i++) {
      if (db === 'postgres') {
        const { rows } = await r.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${selection.sql}`, selection.params);
        const [plan] = rows[0]['QUERY PLAN'] as Array<{ 'Execution Time': number; Plan: Record<string, number> }>;
        server.push({
          ms: plan['Execution Time'],
          pages: plan.Plan['Shared Hit Blocks'] + plan.Plan['Shared Read Blocks'],
        });
      } else {
        // In a READ COMMITTED transaction, as the claim runs: at the session's REPEATABLE READ the same
        // selection walks far fewer pages past the unpurged history, and would understate it.
        const { rows } = await r.transaction((query) =>
          query(`ANALYZE FORMAT=JSON ${selection.sql}`, selection.params),
        );
        const block = (JSON.parse(String(rows[0].ANALYZE)) as MariadbAnalyze).query_block;
        const stats = block.nested_loop?.[0]?.table?.r_engine_stats;
        server.push({ ms: block.r_total_time_ms, pages: stats?.pages_accessed ?? NaN });
      }
    }
    server.sort((a, b) => a.ms - b.ms);
    const middle = server[Math.floor(SERVER_RUNS / 2)];
    const times: number[] = [];
    for (let i = 0; i < PROBE_CLAIMS; i++) {
      const start = process.hrtime.bigint();
      const claimed = await store.claim({ batchSize: BATCH, leaseMs: 60_000, maxAttempts: 10 });
      times.push(ms(start));
      if (claimed.events.length !== BATCH)
        throw new Error(`${db} idle-tx probe: claimed ${claimed.events.length} of ${BATCH}`);
      await store.acknowledge(
        claimed.events.map((e) => e.id),
        claimed.token,
      );
    }
    times.sort((a, b) => a - b);
    return { p50: percentile(times, 50), p95: percentile(times, 95), serverMs: middle.ms, pages: middle.pages };
  };

  const history = async (): Promise<number> => {
    if (db === 'postgres') {
      await sleep(2000); // backends flush their table statistics at most once a second
      await r.query('SELECT pg_stat_clear_snapshot()');
      const { rows } = await r.query(`SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = $1`, [TABLE]);
      return Number(rows[0]?.n_dead_tup ?? NaN);
    }
    const { rows } = await r.query('SHOW ENGINE INNODB STATUS');
    const match = /History list length (\d+)/.exec(String(rows[0]?.Status));
    return match ? Number(match[1]) : NaN;
  };

  /** Publishes and delivers `events` in rounds, probing the claim after each of `stretches` equal parts. */
  const churn = async (
    name: string,
    events: number,
    stretches: number,
    note?: string,
    probeFirst = false,
  ): Promise<Phase> => {
    const trend: Probe[] = probeFirst ? [await probe()] : [];
    let drainMs = 0;
    for (let stretch = 0; stretch < stretches; stretch++) {
      const part = events / stretches;
      for (let done = 0; done < part; done += sizes.round) {
        const n = Math.min(sizes.round, part - done);
        await publish(n);
        const start = process.hrtime.bigint();
        const { delivered } = await worker.drain();
        drainMs += ms(start);
        if (delivered !== n) throw new Error(`${db} idle-tx ${name}: ${delivered} of ${n} delivered`);
      }
      trend.push(await probe());
    }
    const claim = trend[trend.length - 1];
    const phase: Phase = {
      name,
      events,
      claim,
      trend,
      drainPerSecond: events / (drainMs / 1000),
      history: await history(),
      note,
    };
    log(
      `   ${name}: claim p50 ${claim.p50.toFixed(1)} ms, p95 ${claim.p95.toFixed(1)} ms (along: ${trend.map((t) => t.p50.toFixed(1)).join(' → ')}; ` +
        `server ${trend.map((t) => `${t.serverMs.toFixed(2)} ms ${t.pages} pages`).join(' → ')}), ` +
        `${Math.round(phase.drainPerSecond)} events/s, history ${phase.history}`,
    );
    return phase;
  };

  const phases: Phase[] = [];
  let held = '';
  const settings = await serverSettings(db, r);
  try {
    if (db === 'postgres') {
      // Autoanalyze's part (autovacuum may be off on the bench server): with no statistics at all the
      // planner picks a bitmap scan, which never marks dead index entries, so nothing would recover.
      await publish(sizes.round);
      await worker.drain();
      await r.query(`ANALYZE "${TABLE}"`);
    }
    phases.push(await churn('before', sizes.calm, 1));
    const holder = db === 'postgres' ? await holdPostgres() : await holdMariadb();
    try {
      phases.push(await churn('transaction held open', sizes.held, 4));
      held = await holder.describe();
      log(`   ${held}`);
    } finally {
      await holder.end();
    }
    phases.push(await churn('after it ended', sizes.calm, 1, 'first probe at once, nothing else done', true));
    if (db === 'postgres') {
      const start = process.hrtime.bigint();
      await r.query(`VACUUM "${TABLE}"`);
      phases.push(
        await churn('after VACUUM', sizes.calm, 1, `VACUUM of the table took ${Math.round(ms(start))} ms`, true),
      );
    } else {
      // Purge runs by itself once no read view needs the history; wait until it stops shrinking.
      const start = Date.now();
      let last = await history();
      while (Date.now() - start < PURGE_WAIT_MS) {
        await sleep(5000);
        const now = await history();
        if (now >= last) break;
        last = now;
      }
      phases.push(
        await churn(
          'after purge',
          sizes.calm,
          1,
          `waited ${Math.round((Date.now() - start) / 1000)} s for History list length to stop falling (last read ${last})`,
        ),
      );
    }
  } finally {
    await app.close();
    await dropTables(db, r, TABLE);
    await r.close();
  }
  return { phases, held, settings, loadBefore, loadAfter: loadavg() };
}

export function idleTxReport(
  results: Partial<Record<MvccDb, IdleTxResult>>,
  sizes: IdleTxSizes,
  machine: string,
  date: string,
  sqlite: boolean,
): string {
  const f = (n: number, digits = 0) =>
    Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '—';
  const load = (l: number[]) => l.map((v) => v.toFixed(2)).join(' ');
  const lines = [
    `Machine: ${machine}. ${date}.`,
    '',
    `A transaction held open (REPEATABLE READ, one SELECT, then idle) on a connection of its own while ${f(sizes.held)} events ` +
      `are published and delivered in rounds of ${f(sizes.round)} (one publishMany transaction, then \`drain()\`: batch ${BATCH}, ` +
      `concurrency 10, no-op handler); ${f(sizes.calm)} events in each other phase.`,
    '',
    `- Claim: a probe publishes ${f(PROBE_CLAIMS * BATCH)} events, then times ${PROBE_CLAIMS} claims of ${BATCH} through the ` +
      "library's store one after another, nothing else running (each batch acknowledged, untimed). Server: the median of " +
      `${SERVER_RUNS} runs of the claim's own selection under EXPLAIN ANALYZE (PostgreSQL) / ANALYZE FORMAT=JSON in a READ COMMITTED ` +
      'transaction, as the claim runs (MariaDB), ' +
      'and the pages it touched (buffers hit + read; InnoDB pages_accessed): the history it walks past, free of the noise of the machine.',
    '- Probes: at the end of each phase, at each quarter while the transaction is held, and also at once when it has ended and after VACUUM.',
    '- Drain: events per second of `drain()`, publishing not counted. History at the end of the phase: PostgreSQL n_dead_tup of ' +
      'the table; MariaDB "History list length" of SHOW ENGINE INNODB STATUS (server-wide: other clients add to it).',
    '',
    '| database | phase | claim p50 / p95 at end (ms) | claim p50 along (ms) | server: selection ms along | server: pages along | drain (events/s) | history at end | note |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
  ];
  const along = (trend: Probe[], pick: (p: Probe) => string) => trend.map(pick).join(' → ');
  for (const [db, r] of Object.entries(results) as Array<[MvccDb, IdleTxResult]>) {
    for (const p of r.phases) {
      lines.push(
        `| ${db} | ${p.name} (${f(p.events)} events) | ${f(p.claim.p50, 1)} / ${f(p.claim.p95, 1)} | ${along(p.trend, (t) => f(t.p50, 1))} | ` +
          `${along(p.trend, (t) => f(t.serverMs, 2))} | ${along(p.trend, (t) => f(t.pages))} | ${f(p.drainPerSecond)} | ${f(p.history)} | ${p.note ?? ''} |`,
      );
    }
  }
  lines.push('');
  for (const [db, r] of Object.entries(results) as Array<[MvccDb, IdleTxResult]>) {
    lines.push(
      `- ${db} (${r.settings}): the held transaction at the end of its phase — ${r.held}. ` +
        `Load average (1, 5, 15 min) ${load(r.loadBefore)} before, ${load(r.loadAfter)} after.`,
    );
  }
  if (sqlite) {
    lines.push(
      '- sqlite: not measured. SQLite keeps no row-version history of this kind (no MVCC vacuum or purge): an open reader there holds back the WAL checkpoint, and the -wal file grows instead.',
    );
  }
  return `${lines.join('\n')}\n`;
}
