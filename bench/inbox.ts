/**
 * The inbox (issue 39): a consumer's throughput with the inbox against without. No broker is read:
 * the message ids are made in this process (UUIDv7, as the outbox gives its messages), and what is
 * measured is the consumer's database work, `CONCURRENCY` messages in flight at once (a broker consumer
 * with a prefetch of 10). Each message's work inserts one business row:
 *  - plain: the insert alone (autocommit);
 *  - own transaction: the insert in a transaction of its own (`TransactionHost.withTransaction`);
 *  - inbox: `OutboxInboxService.process('billing', id, work)`, the insert through `TransactionHost.tx`;
 *  - floor: the inbox's statements with the bare driver, one connection per message in flight: BEGIN,
 *    the inbox's insert-unless-present (the dialect's), the business insert, COMMIT.
 * The first three run in one application. Each run starts from empty tables, after an untimed tenth of a
 * run of each variant; rounds are interleaved, each starting one variant later.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxInboxModule, OutboxInboxService } from '../lib';
import { dialectForType } from '../lib/dialects/dialect-for-type';
import { outboxTable } from '../lib/dialects/shared/outbox-table';
import { uuidv7 } from '../lib/utils/uuidv7';
import { benchApp, type Db } from './env';
import { median } from './median';
import { raw, type Raw } from './raw';

/** Messages in flight at once. */
const CONCURRENCY = 10;
const CONSUMER = 'billing';

const VARIANTS = ['plain', 'ownTransaction', 'inbox', 'floor'] as const;
type Variant = (typeof VARIANTS)[number];

/** Messages per second, medians of the rounds. */
export type InboxResult = Record<Variant, number>;

const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);
const insertSql = (db: Db, table: string) =>
  `INSERT INTO ${q(db, `${table}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (${db === 'postgres' ? '$1, $2' : '?, ?'})`;
const typeOf = (db: Db) => (db === 'sqlite' ? 'better-sqlite3' : db);

/** Messages per second of `events` messages, `CONCURRENCY` in flight: message i is `once(i)`. */
async function inFlight(events: number, once: (i: number) => Promise<void>): Promise<number> {
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, lane) => {
      for (let i = lane; i < events; i += CONCURRENCY) await once(i);
    }),
  );
  return events / ((performance.now() - started) / 1000);
}

export async function inboxBench(
  db: Db,
  r: Raw,
  table: string,
  events: number,
  rounds: number,
  log: (line: string) => void,
): Promise<InboxResult> {
  const dialect = dialectForType(typeOf(db));
  const inboxTable = outboxTable(`${table}_inbox`);
  const orders = `${table}_orders`;
  const insert = insertSql(db, table);
  await r.query(`DROP TABLE IF EXISTS ${q(db, inboxTable.name)}`);
  for (const sql of dialect.inbox.create(inboxTable)) await r.query(sql);
  const app = await benchApp(
    db,
    table,
    [OutboxInboxModule.forRoot({ tableName: inboxTable.name })],
    // A connection per message in flight, and the inbox's own.
    CONCURRENCY + 2,
  );
  const floor = await raw(db, CONCURRENCY);
  try {
    const host = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
    const inbox = app.get(OutboxInboxService);
    const dataSource = app.get<DataSource>(getDataSourceToken());
    const runs: Record<Variant, (ids: string[]) => Promise<number>> = {
      plain: (ids) =>
        inFlight(ids.length, async () => {
          await dataSource.query(insert, [randomUUID(), 42]);
        }),
      ownTransaction: (ids) =>
        inFlight(ids.length, () =>
          host.withTransaction(async () => {
            await host.tx.query(insert, [randomUUID(), 42]);
          }),
        ),
      inbox: (ids) =>
        inFlight(ids.length, async (i) => {
          const outcome = await inbox.process(CONSUMER, ids[i], async () => {
            await host.tx.query(insert, [randomUUID(), 42]);
          });
          if (outcome.duplicate) throw new Error(`${db} inbox: message ${ids[i]} found a duplicate`);
        }),
      floor: (ids) =>
        inFlight(ids.length, (i) =>
          floor.transaction(async (query) => {
            const receive = dialect.inbox.receive(inboxTable, CONSUMER, ids[i]);
            const { affected } = await query(receive.sql, receive.params);
            if (affected !== 1)
              throw new Error(`${db} inbox floor: the receipt of ${ids[i]} affected ${affected} rows`);
            await query(insert, [randomUUID(), 42]);
          }),
        ),
    };
    const empty = (name: string) =>
      r.query(db === 'sqlite' ? `DELETE FROM "${name}"` : `TRUNCATE TABLE ${q(db, name)}`);
    const count = async (name: string) =>
      Number((await r.query(`SELECT count(*) AS ${q(db, 'n')} FROM ${q(db, name)}`)).rows[0].n);
    /** Messages per second of `variant` on `n` messages, from empty tables; every row checked. */
    const measure = async (variant: Variant, n: number) => {
      await empty(orders);
      await empty(inboxTable.name);
      const ids = Array.from({ length: n }, () => uuidv7());
      const perSecond = await runs[variant](ids);
      const [rows, received] = [await count(orders), await count(inboxTable.name)];
      const expected = variant === 'inbox' || variant === 'floor' ? n : 0;
      if (rows !== n || received !== expected) {
        throw new Error(`${db} ${variant}: ${rows} business rows, ${received} received ids, of ${n}`);
      }
      return perSecond;
    };
    // Untimed: the first round ran 20-40% slower on PostgreSQL (connections, plans, JIT) for every variant.
    for (const variant of VARIANTS) await measure(variant, Math.ceil(events / 10));
    const samples = Object.fromEntries(VARIANTS.map((v) => [v, [] as number[]])) as Record<Variant, number[]>;
    for (let round = 0; round < rounds; round++) {
      // Each round starts one variant later: none always runs first, or right after another.
      for (let i = 0; i < VARIANTS.length; i++) {
        const variant = VARIANTS[(i + round) % VARIANTS.length];
        samples[variant].push(await measure(variant, events));
      }
    }
    const rounded = (values: number[]) => values.map(Math.round).join(', ');
    log(`   inbox: ${VARIANTS.map((v) => `${v} ${rounded(samples[v])}/s`).join('; ')}`);
    return Object.fromEntries(VARIANTS.map((v) => [v, median(samples[v])])) as InboxResult;
  } finally {
    await floor.close();
    await app.close();
    await r.query(`DROP TABLE IF EXISTS ${q(db, inboxTable.name)}`);
  }
}

export function inboxReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const { sizes, drainRounds } = results as { sizes?: { inboxEvents?: number }; drainRounds?: number };
  const rounds = (drainRounds ?? 1) > 1 ? `Medians of ${drainRounds} interleaved rounds` : 'One round';
  const lines = [
    '',
    `Inbox: a consumer's database work on ${f(sizes?.inboxEvents ?? NaN)} messages, ${CONCURRENCY} in flight (a broker's prefetch of ${CONCURRENCY}; no`,
    'broker is read, the ids are made in the process), each message inserting one business row: alone (autocommit),',
    'in a transaction of its own, and through `OutboxInboxService.process()` (the id recorded in the same transaction).',
    'The floor: the same statements with the bare driver, one connection per message in flight — BEGIN, the inbox’s',
    `insert (ON CONFLICT DO NOTHING; INSERT IGNORE on MariaDB), the business insert, COMMIT. ${rounds}, each run on`,
    'empty tables.',
    '',
    '| database | measure | plain insert | own transaction | with the inbox | inbox / plain | inbox / own transaction | floor (raw SQL) | inbox / floor | target |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
  ];
  for (const db of dbs) {
    const t = (results[db] as { inbox?: InboxResult } | undefined)?.inbox;
    if (!t) continue;
    lines.push(
      `| ${db} | a row inserted per message (messages/s) | ${f(t.plain)} | ${f(t.ownTransaction)} | ${f(t.inbox)} | ` +
        `${f(t.inbox / t.plain, 2)} | ${f(t.inbox / t.ownTransaction, 2)} | ${f(t.floor)} | ${f(t.inbox / t.floor, 2)} | reported |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
