/**
 * The operations section of `npm run bench`: what retention and the operations service cost.
 * (a) a claim of 500 while retention deletes a long delivered history, against the same claim with no
 *     history; (b) a soak with a short retention: the table stays small; (c) `stats()` on a big table;
 *     (d) what each index the schema versions added costs an enqueue.
 */
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { OutboxOperations, OutboxService, OutboxWorker } from '../lib';
import { indexNames } from '../lib/dialects/shared/dialect.util';
import { OUTBOX_STORE } from '../lib/outbox.constants';
import type { OutboxStore } from '../lib/store/outbox.store';
import { libraryApp, Sink, type Db } from './env';
import { createTables, dropTables, fill, raw, rawEnqueue, type Raw } from './raw';
import { median } from './median';

export interface OperationsSizes {
  history: number;
  pending: number;
  soakEvents: number;
  soakRatePerSecond: number;
  enqueueSeconds: number;
}

const TABLE = 'bench_outbox';
const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function timedMs(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

/** Delivered rows as a week of retention keeps them: processed over the last 7 days. */
const WEEK_MS = 7 * 24 * 3_600_000;

async function freshTable(db: Db, fillWith: Array<[number, 'pending' | 'delivered']>) {
  const r = await raw(db, 2);
  await dropTables(db, r, TABLE);
  await createTables(db, r, TABLE);
  for (const [count, status] of fillWith) if (count > 0) await fill(db, r, TABLE, count, status, WEEK_MS);
  await r.close();
}

async function rowCount(db: Db): Promise<number> {
  const r = await raw(db, 1);
  const { rows } = await r.query(`SELECT COUNT(*) AS ${q(db, 'n')} FROM ${q(db, TABLE)}`);
  await r.close();
  return Number(rows[0].n);
}

/** (a) Claims of 500 (10 of them, median) with no history, and while one retention pass deletes `history` delivered rows. */
async function retentionClaim(db: Db, sizes: OperationsSizes) {
  const claims = async (store: OutboxStore) => {
    const times: number[] = [];
    for (let i = 0; i < 10; i++)
      times.push(await timedMs(() => store.claim({ batchSize: 500, leaseMs: 60_000, maxAttempts: 10 })));
    return median(times);
  };
  await freshTable(db, [[sizes.pending, 'pending']]);
  let app = await libraryApp(db, TABLE, { worker: { enabled: false } }, 3);
  const emptyMs = await claims(app.get<OutboxStore>(OUTBOX_STORE));
  await app.close();

  await freshTable(db, [
    [sizes.history, 'delivered'],
    [sizes.pending, 'pending'],
  ]);
  app = await libraryApp(
    db,
    TABLE,
    { worker: { enabled: false }, retention: { deliveredMs: 1000, batchSize: 1000 } },
    3,
  );
  await sleep(1100);
  const started = performance.now();
  const purging = app.get(OutboxWorker).purge();
  const purgingMs = await claims(app.get<OutboxStore>(OUTBOX_STORE));
  const purgedBeforeClaimsEnded = await rowCount(db);
  const { delivered } = await purging;
  const purgeSeconds = (performance.now() - started) / 1000;
  await app.close();
  return {
    emptyMs,
    purgingMs,
    ratio: purgingMs / emptyMs,
    deleted: delivered,
    purgeSeconds,
    rowsWhenClaimsEnded: purgedBeforeClaimsEnded,
  };
}

/**
 * (b) `soakEvents` published at a steady rate through the library, delivered by its worker, with
 * `retention: { deliveredMs: 10 s, intervalMs: 1 s }`: rows in the table when the last is delivered,
 * against the events delivered in the 10 s before.
 */
async function soak(db: Db, sizes: OperationsSizes) {
  await freshTable(db, []);
  const app = await libraryApp(
    db,
    TABLE,
    { worker: { batchSize: 500 }, retention: { deliveredMs: 10_000, intervalMs: 1000 } },
    6,
  );
  const sink = app.get(Sink);
  const deliveries: number[] = [];
  sink.onReceive = () => deliveries.push(performance.now());
  const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
  const outbox = app.get(OutboxService);
  const perTick = Math.ceil(sizes.soakRatePerSecond / 10);
  const started = performance.now();
  for (let sent = 0, tick = 0; sent < sizes.soakEvents; tick++) {
    const n = Math.min(perTick, sizes.soakEvents - sent);
    await tx.withTransaction(() =>
      outbox.publishMany(Array.from({ length: n }, (_, i) => ({ topic: 'bench.event', payload: { i: sent + i } }))),
    );
    sent += n;
    const wait = started + ((tick + 1) * 1000) / 10 - performance.now();
    if (wait > 0) await sleep(wait);
  }
  const deadline = performance.now() + 120_000;
  while (sink.count < sizes.soakEvents && performance.now() < deadline) await sleep(50);
  const end = performance.now();
  const rows = await rowCount(db);
  const lastTenSeconds = deliveries.filter((at) => at > end - 10_000).length;
  await app.close();
  return {
    events: sizes.soakEvents,
    delivered: sink.count,
    seconds: (end - started) / 1000,
    rowsAtEnd: rows,
    deliveredLast10s: lastTenSeconds,
    ratio: rows / lastTenSeconds,
  };
}

/** (c) `stats()` (10 calls, median) on `history` delivered rows (a week of them), 1,000 pending and 300 dead. */
async function stats(db: Db, sizes: OperationsSizes) {
  await freshTable(db, [
    [sizes.history, 'delivered'],
    [1000, 'pending'],
  ]);
  const r = await raw(db, 1);
  await r.query(
    `UPDATE ${q(db, TABLE)} SET ${q(db, 'status')} = 'dead', ${q(db, 'last_error')} = 'boom' WHERE ${q(db, 'id')} IN ` +
      `(SELECT ${q(db, 'id')} FROM (SELECT ${q(db, 'id')} FROM ${q(db, TABLE)} WHERE ${q(db, 'status')} = 'delivered' LIMIT 300) AS x)`,
  );
  await r.close();
  const app = await libraryApp(db, TABLE, { worker: { enabled: false } }, 3);
  const ops = app.get(OutboxOperations);
  await ops.stats();
  const times: number[] = [];
  for (let i = 0; i < 10; i++) times.push(await timedMs(() => ops.stats()));
  const estimated = await ops.stats();
  const exactStarted = performance.now();
  const exact = await ops.stats({ exact: true });
  const exactMs = performance.now() - exactStarted;
  await app.close();
  return {
    rows: sizes.history + 1000,
    medianMs: median(times),
    delivered: { estimate: estimated.delivered, exact: exact.delivered, estimated: !estimated.deliveredExact },
    exactMs,
  };
}

/**
 * (d) Business transactions with one event per second (the library's INSERT with the bare driver, one
 * client: the library refuses to start without the index) with and without the retention index of
 * schema version 3, in 3 interleaved rounds, medians.
 */
async function indexCost(db: Db, sizes: OperationsSizes) {
  const rate = async (r: Raw) => {
    let n = 0;
    const until = performance.now() + sizes.enqueueSeconds * 1000;
    while (performance.now() < until) {
      await rawEnqueue(db, r, TABLE, true);
      n++;
    }
    return n / sizes.enqueueSeconds;
  };
  const index = indexNames(TABLE).retention;
  const rounds: Array<{ with: number; without: number }> = [];
  for (let round = 0; round < 3; round++) {
    await freshTable(db, []);
    const r = await raw(db, 1);
    const withIndex = await rate(r);
    await r.query(db === 'mariadb' ? `DROP INDEX \`${index}\` ON \`${TABLE}\`` : `DROP INDEX "${index}"`);
    await r.query(`DELETE FROM ${q(db, TABLE)}`);
    rounds.push({ with: withIndex, without: await rate(r) });
    await r.close();
  }
  const withIndex = median(rounds.map((r) => r.with));
  const without = median(rounds.map((r) => r.without));
  return { index: 'retention (v3)', withPerSecond: withIndex, withoutPerSecond: without, ratio: withIndex / without };
}

export async function operationsBench(db: Db, sizes: OperationsSizes, log: (line: string) => void) {
  log(`— ${db}: retention during claims`);
  const claim = await retentionClaim(db, sizes);
  log(`— ${db}: soak with retention`);
  const soakResult = await soak(db, sizes);
  log(`— ${db}: stats()`);
  const statsResult = await stats(db, sizes);
  log(`— ${db}: index cost on enqueue`);
  const index = await indexCost(db, sizes);
  const r = await raw(db, 1);
  await dropTables(db, r, TABLE);
  await r.close();
  return { retentionClaim: claim, soak: soakResult, stats: statsResult, indexCost: index };
}

export type OperationsResult = Awaited<ReturnType<typeof operationsBench>>;

export function operationsRows(
  db: Db,
  o: OperationsResult,
  sizes: OperationsSizes,
  f: (n: number, digits?: number) => string,
): string[] {
  const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
  const lines: string[] = [];
  const c = o.retentionClaim;
  if (c) {
    lines.push(
      `| ${db} | claim of 500, 10,000 pending: empty vs while retention deletes ${f(c.deleted)} delivered (ms) | | ` +
        `${f(c.emptyMs, 1)} vs ${f(c.purgingMs, 1)} (pass: ${f(c.purgeSeconds, 1)} s) | ${f(c.ratio, 2)} | ≤ 2: ${verdict(c.ratio <= 2)} |`,
    );
  }
  const s = o.soak;
  lines.push(
    `| ${db} | soak of ${f(s.events)} events at ${f(sizes.soakRatePerSecond)}/s, deliveredMs 10 s: rows at the end vs delivered in the last 10 s | | ` +
      `${f(s.rowsAtEnd)} vs ${f(s.deliveredLast10s)} (${f(s.delivered)} delivered in ${f(s.seconds, 1)} s) | ${f(s.ratio, 2)} | < 2: ${verdict(s.ratio < 2)} |`,
  );
  const st = o.stats;
  const delivered = st.delivered.estimated
    ? `delivered estimated ${f(st.delivered.estimate)} of ${f(st.delivered.exact)}`
    : `delivered counted: ${f(st.delivered.exact)}`;
  lines.push(
    `| ${db} | stats() on ${f(st.rows)} rows (a week of deliveries, 1,000 pending, 300 dead), median (ms) | | ` +
      `${f(st.medianMs, 1)} (${delivered}; stats({ exact: true }) ${f(st.exactMs)} ms) | | ` +
      (db === 'sqlite' ? 'no target |' : `< 50: ${verdict(st.medianMs < 50)} |`),
  );
  const i = o.indexCost;
  lines.push(
    `| ${db} | business tx + event with the bare driver, 1 client: without vs with the ${i.index} index (tx/s) | ${f(i.withoutPerSecond)} | ${f(i.withPerSecond)} | ${f(i.ratio, 2)} | reported |`,
  );
  return lines;
}
