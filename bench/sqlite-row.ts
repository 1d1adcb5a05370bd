/**
 * What a narrower SQLite row would buy (issue 15): the claim and the acknowledgement of 50,000 events,
 * batch 500, timed statement by statement on the bare better-sqlite3 driver, in three shapes:
 *
 * - `library`: the library's own table (all schema versions) and its own claim and acknowledgement SQL;
 * - `narrow`: the same columns and the same guarantees (lease and token, attempts counted at claim, the
 *   dead-letter at the last attempt, the expired attempt's history and note, the fenced acknowledgement)
 *   with an integer row key, integer status and integer times in milliseconds;
 * - `relay`: the minimal relay's table and statements (see relay.ts).
 *
 * `npx ts-node --transpile-only -P tsconfig.json bench/sqlite-row.ts` — files in /tmp, nothing else touched.
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { SqliteDialect } from '../lib/dialects/sqlite/sqlite.dialect';
import { sqliteSchema } from '../lib/dialects/sqlite/sqlite-schema';
import { OUTBOX_SCHEMA_VERSIONS } from '../lib/schema/outbox-migrations';
import { appendAttempt, type AttemptLogSql } from '../lib/dialects/shared/attempt-log';
import { uuidv7 } from '../lib/utils/uuidv7';
import { outboxTable } from '../lib/dialects/shared/outbox-table';
import type { SqlExecutor, Statement } from '../lib/dialects/shared/outbox-dialect.interface';
import { insertStatement } from '../lib/dialects/shared/insert-statement';
import { acknowledgeStatement } from '../lib/dialects/shared/outcome-statements';
import { median } from './median';

const EVENTS = 50_000;
const BATCH = Number(process.env.OUTBOX_BENCH_BATCH ?? 500);
const ROUNDS = 3;
const MAX_ATTEMPTS = 10;
const LEASE_MS = 30_000;

interface Cost {
  claim: number;
  ack: number;
}

function open(file: string): Database.Database {
  for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true });
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  return db;
}

/** Drains the table with `claim` and `ack`, timing each; µs per event. */
async function drain<R>(claim: () => R[] | Promise<R[]>, ack: (rows: R[]) => unknown): Promise<Cost> {
  let claiming = 0;
  let acknowledging = 0;
  let events = 0;
  for (;;) {
    let started = performance.now();
    const rows = await claim();
    claiming += performance.now() - started;
    if (rows.length === 0) break;
    events += rows.length;
    started = performance.now();
    ack(rows);
    acknowledging += performance.now() - started;
  }
  if (events !== EVENTS) throw new Error(`drained ${events} of ${EVENTS}`);
  return { claim: (claiming * 1000) / events, ack: (acknowledging * 1000) / events };
}

const placeholders = (n: number) => Array.from({ length: n }, () => '?').join(', ');

async function library(): Promise<Cost> {
  const db = open('/tmp/outbox-sqlite-row-library.sqlite');
  const table = outboxTable('outbox_event');
  const dialect = new SqliteDialect();
  for (const sql of sqliteSchema.createSchema(table)) db.exec(sql);
  for (const { version } of OUTBOX_SCHEMA_VERSIONS)
    for (const sql of sqliteSchema.upgrade(version, table)) db.exec(sql);
  const event = {
    topic: 'bench.event',
    key: null,
    dedupeKey: null,
    payloadJson: '{"n":1}',
    headersJson: '{}',
    headers: {},
    availableAt: null,
    delayMs: 0,
  };
  db.transaction(() => {
    for (let done = 0; done < EVENTS; done += 500) {
      const { sql, params } = insertStatement(
        dialect.flavor,
        table,
        Array.from({ length: 500 }, () => ({ id: uuidv7(), event })),
      );
      db.prepare(sql).run(...params);
    }
  })();
  // The dialect's claim is async over an executor; the statement itself runs synchronously inside it.
  const run = ({ sql, params }: Statement) => {
    const rows = db.prepare(sql).all(...params) as Record<string, unknown>[];
    return Promise.resolve({ rows, affected: rows.length });
  };
  const executor: SqlExecutor = { run, transaction: (work) => work(run) };
  let token = '';
  return drain(
    () => {
      token = randomUUID();
      return dialect.claim(executor, table, { batchSize: BATCH, token, leaseMs: LEASE_MS, maxAttempts: MAX_ATTEMPTS });
    },
    (rows) => {
      const { sql, params } = acknowledgeStatement(
        dialect.flavor,
        table,
        rows.map((row) => String(row.id)),
        token,
      );
      db.prepare(sql).run(...params);
    },
  );
}

const NOW_MS = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`;

function narrow(): Promise<Cost> {
  const db = open('/tmp/outbox-sqlite-row-narrow.sqlite');
  db.exec(`CREATE TABLE "n" ("seq" INTEGER PRIMARY KEY, "id" text NOT NULL, "topic" text NOT NULL, "key" text,
    "dedupe_key" text, "payload" text NOT NULL, "headers" text NOT NULL DEFAULT '{}', "status" integer NOT NULL DEFAULT 0,
    "attempts" integer NOT NULL DEFAULT 0, "available_at" integer NOT NULL, "claim_token" integer,
    "completed_handlers" text NOT NULL DEFAULT '[]', "last_error" text, "created_at" integer NOT NULL, "processed_at" integer,
    "expired_attempts" integer NOT NULL DEFAULT 0, "last_expired_attempt" integer, "note" text, "claimed_at" integer,
    "attempt_log" text, "redrive_count" integer NOT NULL DEFAULT 0)`);
  db.exec(`CREATE UNIQUE INDEX "n_id" ON "n" ("id")`);
  db.exec(`CREATE INDEX "n_claim" ON "n" ("available_at", "seq") WHERE "status" = 0`);
  db.exec(`CREATE UNIQUE INDEX "n_dedupe" ON "n" ("dedupe_key") WHERE "dedupe_key" IS NOT NULL`);
  db.exec(`CREATE INDEX "n_retention" ON "n" ("status", "processed_at") WHERE "status" = 1 OR "status" = 2`);
  const insert = db.prepare(
    `INSERT INTO "n" ("id", "topic", "key", "dedupe_key", "payload", "headers", "available_at", "created_at") ` +
      `VALUES (?, 'bench.event', NULL, NULL, '{"n":1}', '{}', ${NOW_MS}, ${NOW_MS})`,
  );
  db.transaction(() => {
    for (let i = 0; i < EVENTS; i++) insert.run(uuidv7());
  })();
  const now = '(SELECT "now" FROM clock)';
  const spent = `"attempts" >= ${MAX_ATTEMPTS}`;
  const log: AttemptLogSql = {
    object: (e) =>
      `json_object('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, 'outcome', ${e.outcome}, 'error', ${e.error}, 'round', ${e.round})`,
    append: (current, entry) => `json_insert(COALESCE(${current}, '[]'), '$[#]', ${entry})`,
  };
  const expired = appendAttempt(log, '"attempt_log"', {
    attempt: '"attempts"',
    startedAt: '"claimed_at"',
    finishedAt: '"available_at"',
    outcome: "'expired'",
    error: 'NULL',
    round: '"redrive_count"',
  });
  const claim = db.prepare(`WITH clock AS (SELECT ${NOW_MS} AS "now"),
    picked AS (SELECT "seq" FROM "n" WHERE "status" = 0 AND "available_at" <= ${now} ORDER BY "available_at", "seq" LIMIT ?)
    UPDATE "n" SET
      "attempts" = CASE WHEN ${spent} THEN "attempts" ELSE "attempts" + 1 END,
      "claim_token" = CASE WHEN ${spent} THEN NULL ELSE ? END,
      "available_at" = CASE WHEN ${spent} THEN "available_at" ELSE ${now} + ${LEASE_MS} END,
      "status" = CASE WHEN ${spent} THEN 2 ELSE 0 END,
      "processed_at" = CASE WHEN ${spent} THEN ${now} ELSE NULL END,
      "claimed_at" = CASE WHEN ${spent} THEN "claimed_at" ELSE ${now} END,
      "attempt_log" = CASE WHEN "claim_token" IS NOT NULL THEN ${expired} ELSE "attempt_log" END,
      "expired_attempts" = "expired_attempts" + CASE WHEN "claim_token" IS NOT NULL THEN 1 ELSE 0 END,
      "last_expired_attempt" = CASE WHEN "claim_token" IS NOT NULL THEN "attempts" ELSE "last_expired_attempt" END,
      "note" = CASE WHEN "claim_token" IS NOT NULL THEN 'expired' WHEN ${spent} AND "last_error" IS NULL THEN 'no outcome' ELSE "note" END
    WHERE "seq" IN (SELECT "seq" FROM picked) AND "status" = 0 AND "available_at" <= ${now}
    RETURNING "seq", "id", "topic", "key", "payload", "headers", "status", "attempts", "completed_handlers", "last_error",
      "note", "last_expired_attempt", "created_at"`);
  let token = 0;
  return drain(
    () => claim.all(BATCH, ++token) as Array<{ seq: number }>,
    (rows) =>
      db
        .prepare(
          `UPDATE "n" SET "status" = 1, "claim_token" = NULL, "processed_at" = ${NOW_MS} ` +
            `WHERE "seq" IN (${placeholders(rows.length)}) AND "status" = 0 AND "claim_token" = ? AND "available_at" > ${NOW_MS}`,
        )
        .run(...rows.map((row) => row.seq), token),
  );
}

function relay(): Promise<Cost> {
  const db = open('/tmp/outbox-sqlite-row-relay.sqlite');
  db.exec(
    `CREATE TABLE "r" ("id" INTEGER PRIMARY KEY, "topic" text NOT NULL, "payload" text NOT NULL, "status" integer NOT NULL DEFAULT 0)`,
  );
  db.exec(`CREATE INDEX "r_due" ON "r" ("id") WHERE "status" = 0`);
  const insert = db.prepare(`INSERT INTO "r" ("topic", "payload") VALUES ('bench.event', '{"n":1}')`);
  db.transaction(() => {
    for (let i = 0; i < EVENTS; i++) insert.run();
  })();
  const claim = db.prepare(
    `UPDATE "r" SET "status" = 1 WHERE "id" IN (SELECT "id" FROM "r" WHERE "status" = 0 ORDER BY "id" LIMIT ?) RETURNING "id", "payload"`,
  );
  return drain(
    () => claim.all(BATCH) as Array<{ id: number }>,
    (rows) =>
      db
        .prepare(`UPDATE "r" SET "status" = 2 WHERE "id" IN (${placeholders(rows.length)})`)
        .run(...rows.map((row) => row.id)),
  );
}

async function main(): Promise<void> {
  const shapes: Array<[string, () => Promise<Cost>]> = [
    ['library', library],
    ['narrow', narrow],
    ['relay', relay],
  ];
  const costs = new Map<string, Cost[]>(shapes.map(([name]) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of shapes) costs.get(name)!.push(await run());
  }
  console.log(`SQLite, ${EVENTS} events, batch ${BATCH}, median of ${ROUNDS} rounds, µs per event:`);
  for (const [name, runs] of costs) {
    const claim = median(runs.map((c) => c.claim));
    const ack = median(runs.map((c) => c.ack));
    console.log(
      `${name.padEnd(8)} claim ${claim.toFixed(2)}  acknowledge ${ack.toFixed(2)}  both ${median(runs.map((c) => c.claim + c.ack)).toFixed(2)}`,
    );
  }
}

void main();
