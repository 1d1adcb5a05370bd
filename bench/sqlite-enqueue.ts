/**
 * Where an SQLite enqueue's cost goes (issue 15, item 3): business transactions of one order row, alone
 * and with one event, on the bare better-sqlite3 driver, one client, 2 s per variant, median of 3
 * rounds. The event is the relay's row (integer key, three columns) or the library's own INSERT on its
 * table, as released or changed one way: without the claim index, with a claim index on the due time
 * alone, or the table WITHOUT ROWID (the id's index and the table in one tree).
 *
 * `npx ts-node --transpile-only -P tsconfig.json bench/sqlite-enqueue.ts` — a file in /tmp, nothing else touched.
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { SqliteDialect } from '../lib/dialects/sqlite/sqlite.dialect';
import { sqliteSchema } from '../lib/dialects/sqlite/sqlite-schema';
import { indexNames } from '../lib/dialects/shared/dialect.util';
import { outboxTable } from '../lib/dialects/shared/outbox-table';
import { OUTBOX_SCHEMA_VERSIONS } from '../lib/schema/outbox-migrations';
import { uuidv7 } from '../lib/utils/uuidv7';
import { insertStatement } from '../lib/dialects/shared/insert-statement';
import { median } from './median';

const FILE = '/tmp/outbox-sqlite-enqueue.sqlite';
const SECONDS = 2;
const ROUNDS = 3;
const table = outboxTable('outbox_event');
const dialect = new SqliteDialect();
const event = {
  topic: 'bench.event',
  key: null,
  dedupeKey: null,
  payloadJson: '',
  headersJson: '{}',
  headers: {},
  availableAt: null,
  delayMs: 0,
};

type Variant = 'business only' | 'relay' | 'library' | 'no claim index' | 'claim index on due time' | 'without rowid';
const VARIANTS: Variant[] = [
  'business only',
  'relay',
  'library',
  'no claim index',
  'claim index on due time',
  'without rowid',
];

function open(variant: Variant): Database.Database {
  for (const suffix of ['', '-wal', '-shm']) rmSync(FILE + suffix, { force: true });
  const db = new Database(FILE);
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE "orders" ("id" varchar(36) PRIMARY KEY, "amount" integer NOT NULL)');
  if (variant === 'relay') {
    db.exec(
      `CREATE TABLE "r" ("id" INTEGER PRIMARY KEY, "topic" text NOT NULL, "payload" text NOT NULL, "status" integer NOT NULL DEFAULT 0)`,
    );
    db.exec(`CREATE INDEX "r_due" ON "r" ("id") WHERE "status" = 0`);
  } else if (variant !== 'business only') {
    for (const sql of sqliteSchema.createSchema(table))
      db.exec(variant === 'without rowid' && sql.startsWith('CREATE TABLE') ? `${sql} WITHOUT ROWID` : sql);
    for (const { version } of OUTBOX_SCHEMA_VERSIONS)
      for (const sql of sqliteSchema.upgrade(version, table)) db.exec(sql);
    const claim = indexNames(table.name).claim;
    if (variant === 'no claim index' || variant === 'claim index on due time') db.exec(`DROP INDEX "${claim}"`);
    if (variant === 'claim index on due time')
      db.exec(`CREATE INDEX "${claim}" ON "outbox_event" ("available_at") WHERE "status" = 'pending'`);
  }
  return db;
}

/** Business transactions per second. */
function rate(variant: Variant): number {
  const db = open(variant);
  const order = db.prepare('INSERT INTO "orders" ("id", "amount") VALUES (?, 42)');
  const relay =
    variant === 'relay' ? db.prepare(`INSERT INTO "r" ("topic", "payload") VALUES ('bench.event', ?)`) : undefined;
  const library =
    variant === 'relay' || variant === 'business only'
      ? undefined
      : db.prepare(insertStatement(dialect.flavor, table, [{ id: uuidv7(), event }]).sql);
  const transaction = db.transaction(() => {
    const id = randomUUID();
    order.run(id);
    const payloadJson = JSON.stringify({ orderId: id, amount: 42 });
    relay?.run(payloadJson);
    library?.run(
      ...insertStatement(dialect.flavor, table, [{ id: uuidv7(), event: { ...event, payloadJson } }]).params,
    );
  });
  let count = 0;
  const until = performance.now() + SECONDS * 1000;
  while (performance.now() < until) {
    transaction();
    count++;
  }
  db.close();
  return count / SECONDS;
}

const rates = new Map<Variant, number[]>(VARIANTS.map((v) => [v, []]));
for (let round = 0; round < ROUNDS; round++) for (const variant of VARIANTS) rates.get(variant)!.push(rate(variant));
const alone = median(rates.get('business only')!);
console.log(`SQLite enqueue, one client, median of ${ROUNDS} rounds of ${SECONDS} s:`);
for (const [variant, runs] of rates) {
  const perSecond = median(runs);
  console.log(
    `${variant.padEnd(24)} ${Math.round(perSecond).toLocaleString('en')} tx/s  ${(1e6 / perSecond).toFixed(1)} µs/tx` +
      (variant === 'business only' ? '' : `  with/without ${(perSecond / alone).toFixed(2)}`),
  );
}
