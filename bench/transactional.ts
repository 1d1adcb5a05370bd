/**
 * Transactional handlers (issue 39): the drain with a handler that inserts one row per event inside
 * the outbox's transaction (`{ transactional: true }`), against the same handler inserting the same row
 * outside it (autocommit), in the same process, rounds interleaved.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import type { DataSource } from 'typeorm';
import { OutboxHandler, OutboxWorker } from '../lib';
import { libraryApp, type Db } from './env';
import { median } from './median';
import { fill, raw, type Raw } from './raw';

/** The batch and the lanes of the measured worker. */
const BATCH = 500;
const CONCURRENCY = 10;

/** Targets of issue 39: transactional over plain, at batch 500. */
export const TRANSACTIONAL_TARGETS: Record<Db, number> = { postgres: 0.7, sqlite: 0.7, mariadb: 0.6 };

export interface TransactionalResult {
  /** Events per second, medians of the rounds. */
  plain: number;
  transactional: number;
  /**
   * The floor, with the bare driver on as many connections as lanes: the plain insert (autocommit)
   * against BEGIN, the insert, the fenced append to the event's completed targets, COMMIT — per event,
   * nothing else (no claim, no acknowledgement).
   */
  rawPlain: number;
  rawTransactional: number;
}

type Kind = 'plain' | 'transactional';

const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);
const insertSql = (db: Db, table: string) =>
  `INSERT INTO ${q(db, `${table}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (${db === 'postgres' ? '$1, $2' : '?, ?'})`;

/** Where the handlers write; set before the app starts. */
const target = { db: 'sqlite' as Db, table: '' };

@Injectable()
class PlainInsert {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
  @OutboxHandler('bench.event')
  async handle() {
    await this.dataSource.query(insertSql(target.db, target.table), [randomUUID(), 42]);
  }
}

@Injectable()
class TransactionalInsert {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>) {}
  @OutboxHandler('bench.event', { transactional: true })
  async handle() {
    await this.txHost.tx.query(insertSql(target.db, target.table), [randomUUID(), 42]);
  }
}

/** Events per second of one drain of `events` filled rows by a worker whose handler is `kind`'s. */
async function drainOnce(db: Db, r: Raw, table: string, events: number, kind: Kind) {
  await r.query(`DELETE FROM ${q(db, table)}`);
  await r.query(`DELETE FROM ${q(db, `${table}_orders`)}`);
  await fill(db, r, table, events);
  target.db = db;
  target.table = table;
  const app = await libraryApp(
    db,
    table,
    { worker: { enabled: false, batchSize: BATCH, concurrency: CONCURRENCY } },
    // The transactional handler holds a connection per lane, beside the worker's own statements.
    CONCURRENCY + 4,
    [kind === 'plain' ? PlainInsert : TransactionalInsert],
  );
  try {
    const started = performance.now();
    const result = await app.get(OutboxWorker).drain();
    const seconds = (performance.now() - started) / 1000;
    const [{ n }] = (await r.query(`SELECT count(*) AS n FROM ${q(db, `${table}_orders`)}`)).rows;
    if (result.delivered !== events || Number(n) !== events) {
      throw new Error(`${db} ${kind} drain: ${result.delivered} delivered, ${String(n)} rows, of ${events}`);
    }
    return events / seconds;
  } finally {
    await app.close();
  }
}

/** The fenced append of a handler to an event's completed targets, as the library writes it, in bare SQL. */
function appendSql(db: Db, table: string): string {
  if (db === 'postgres') {
    return `UPDATE "${table}" SET "completed_handlers" = "completed_handlers" || jsonb_build_array($1::text) WHERE "id" = $2 AND "status" IN ('pending', 'waiting') AND "claim_token" IS NULL`;
  }
  if (db === 'mariadb') {
    return `UPDATE \`${table}\` SET \`completed_handlers\` = JSON_ARRAY_APPEND(\`completed_handlers\`, '$', ?) WHERE \`id\` = ? AND \`status\` IN ('pending', 'waiting') AND \`claim_token\` IS NULL`;
  }
  return `UPDATE "${table}" SET "completed_handlers" = json_insert("completed_handlers", '$[#]', ?) WHERE "id" = ? AND "status" IN ('pending', 'waiting') AND "claim_token" IS NULL`;
}

/** Events per second of the floor's `kind`, on `events` filled rows, one loop per lane. */
async function rawOnce(db: Db, table: string, events: number, kind: Kind) {
  const r = await raw(db, CONCURRENCY + 1);
  try {
    await r.query(`DELETE FROM ${q(db, table)}`);
    await r.query(`DELETE FROM ${q(db, `${table}_orders`)}`);
    await fill(db, r, table, events);
    const ids = (await r.query(`SELECT ${q(db, 'id')} FROM ${q(db, table)}`)).rows.map((row) => row.id);
    const insert = insertSql(db, table);
    const append = appendSql(db, table);
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, lane) => {
        for (let i = lane; i < ids.length; i += CONCURRENCY) {
          if (kind === 'plain') {
            await r.query(insert, [randomUUID(), 42]);
            continue;
          }
          await r.transaction(async (query) => {
            await query(insert, [randomUUID(), 42]);
            const { affected } = await query(append, ['Bench.handle', ids[i]]);
            if (affected !== 1) throw new Error(`${db} raw transactional: the append found ${affected} rows`);
          });
        }
      }),
    );
    return events / ((performance.now() - started) / 1000);
  } finally {
    await r.close();
  }
}

export async function transactionalBench(
  db: Db,
  r: Raw,
  table: string,
  events: number,
  rounds: number,
  log: (line: string) => void,
): Promise<TransactionalResult> {
  const samples = {
    plain: [] as number[],
    transactional: [] as number[],
    rawPlain: [] as number[],
    rawTransactional: [] as number[],
  };
  for (let round = 0; round < rounds; round++) {
    for (const kind of ['plain', 'transactional'] as const) {
      samples[kind].push(await drainOnce(db, r, table, events, kind));
      samples[kind === 'plain' ? 'rawPlain' : 'rawTransactional'].push(await rawOnce(db, table, events, kind));
    }
  }
  const rounded = (values: number[]) => values.map(Math.round).join(', ');
  log(
    `   transactional: plain ${rounded(samples.plain)}/s, transactional ${rounded(samples.transactional)}/s; raw ${rounded(samples.rawPlain)}/s, ${rounded(samples.rawTransactional)}/s`,
  );
  return {
    plain: median(samples.plain),
    transactional: median(samples.transactional),
    rawPlain: median(samples.rawPlain),
    rawTransactional: median(samples.rawTransactional),
  };
}

export function transactionalReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const lines = [
    '',
    `Transactional handlers: the drain (one worker, batch ${BATCH}, ${CONCURRENCY} lanes) with a handler inserting one row`,
    'per event in the outbox’s transaction (`{ transactional: true }`), against the same insert outside it.',
    '',
    'The floor: the same statements with the bare driver, one loop per lane, nothing else (no claim, no',
    'acknowledgement): the plain insert, and BEGIN, the insert, the fenced append, COMMIT.',
    '',
    '| database | measure | plain handler | transactional | transactional / plain | floor (raw SQL) | target |',
    '| --- | --- | ---: | ---: | ---: | ---: | --- |',
  ];
  for (const db of dbs) {
    const t = (results[db] as { transactional?: TransactionalResult } | undefined)?.transactional;
    if (!t) continue;
    const ratio = t.transactional / t.plain;
    const floor = t.rawTransactional / t.rawPlain;
    const goal = TRANSACTIONAL_TARGETS[db];
    lines.push(
      `| ${db} | drain, a row inserted per event (events/s) | ${f(t.plain)} | ${f(t.transactional)} | ${f(ratio, 2)} | ${f(t.rawPlain)} / ${f(t.rawTransactional)} = ${f(floor, 2)} | ≥ ${goal}: ${ratio >= goal ? 'PASS' : 'FAIL'} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
