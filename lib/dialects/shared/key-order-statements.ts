import type { KeyPlace } from './insert-statement';
import type { Bind, SqlFlavor, Statement } from './outbox-dialect.interface';
import { keysTableOf, type OutboxTable } from './outbox-table';
import { StatementBuilder } from './statement-builder';

/**
 * Per-key order's statements (see docs/internals/ordering.md), written once for every database: the keys' table
 * hands out each key's sequence at publish, and names each key's front, the one event of the key that
 * may be claimed.
 */

/** The parameters one key binds in the keys' upsert. */
export const PARAMETERS_PER_KEY = 3;

/** A key's share of one publish: how many events it adds, and the first of them (its front if it has none). */
export interface KeyClaim {
  key: string;
  count: number;
  firstId: string;
}

/**
 * Hands out `count` numbers to each key and makes `firstId` its front where it has none, in one upsert
 * that locks each key's row to the caller's commit (so a key's numbers follow commit order). Returns the
 * keys' rows (key, last_seq, front_id) where the database can; else read them with `keyRows`.
 */
export function claimKeysStatement(f: SqlFlavor, table: OutboxTable, claims: KeyClaim[], reportOne = false): Statement {
  const b = new StatementBuilder(f.placeholder);
  const values = claims.map((c) => `(${b.bind(c.key)}, ${f.integer(b.bind(c.count))}, ${b.bind(c.firstId)})`);
  const c = f.ident;
  const into = f.keyOrder.into ?? ((keys: string) => keys);
  const upsert =
    `INSERT INTO ${into(f.table(keysTableOf(table)))} (${c('key')}, ${c('last_seq')}, ${c('front_id')}) ` +
    `VALUES ${values.join(', ')}${reportOne ? f.keyOrder.reportOne! : f.keyOrder.upsert}`;
  return b.statement(f.keyOrder.returning ? f.keyOrder.returning(upsert) : upsert);
}

/** The rows of `keys`: the last number each handed out, and its front. */
export function keyRowsStatement(f: SqlFlavor, table: OutboxTable, keys: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT ${c('key')}, ${c('last_seq')}, ${c('front_id')} FROM ${f.byId(keysTableOf(table))} ` +
      `WHERE ${keyIn(f, b.bind, keys)}`,
  );
}

/**
 * Locks the rows of `keys`, in the order publishers lock them (so two transactions never wait for each
 * other's keys: see `sortKeys`), and no other row, before a front moves: the statements after it see
 * every publisher of these keys that committed meanwhile. Undefined where one writer at a time holds
 * the whole database (SQLite).
 */
export function lockKeysStatement(f: SqlFlavor, table: OutboxTable, keys: string[]): Statement | undefined {
  if (f.forUpdate === '') return undefined;
  const b = new StatementBuilder(f.placeholder);
  return b.statement(
    `SELECT ${f.ident('key')} FROM ${f.byId(keysTableOf(table))} WHERE ${keyIn(f, b.bind, keys)} ` +
      `ORDER BY ${f.keyOrder.byteOrder ?? f.ident('key')}${f.forUpdate}`,
  );
}

/**
 * Moves the front of those of `keys` whose front is one of `finished` and no longer pending or waiting
 * (acknowledged, dead and skipped, discarded, or never written): to the lowest waiting event of the key,
 * or to none. A front still unfinished (the fenced write was refused) stays.
 */
export function moveFrontsStatement(f: SqlFlavor, table: OutboxTable, keys: string[], finished: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const events = f.table(table);
  const next =
    `SELECT e.${c('id')} FROM ${byKey(f, table, 'e')} WHERE e.${c('key')} = k.${c('key')} AND e.${c('status')} = 'waiting' ` +
    `ORDER BY e.${c('seq')} LIMIT 1`;
  const open =
    `SELECT 1 FROM ${events} o WHERE o.${c('id')} = k.${c('front_id')} ` +
    `AND o.${c('status')} IN ('pending', 'waiting')`;
  return b.statement(
    `UPDATE ${f.byId(keysTableOf(table), 'k')} SET ${c('front_id')} = (${next}) ` +
      `WHERE ${keyIn(f, b.bind, keys, 'k.')} AND k.${c('front_id')} IN (${list(b.bind, finished)}) ` +
      `AND NOT EXISTS (${open})`,
  );
}

/**
 * The fronts of `keys`, where the move cannot return them (MySQL): a plain read of rows the transaction
 * holds, made claimable by id with `promoteStatement`. One UPDATE joining the keys to their fronts read
 * the keys' table whole on a table of few keys, waiting for the rows other transactions held: acks and
 * publishers then deadlocked.
 */
export function frontsOfStatement(f: SqlFlavor, table: OutboxTable, keys: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT ${c('front_id')} FROM ${f.byId(keysTableOf(table))} ` +
      `WHERE ${keyIn(f, b.bind, keys)} AND ${c('front_id')} IS NOT NULL`,
  );
}

/** Makes those of `ids` that wait claimable (they are their keys' new fronts). */
export function promoteStatement(f: SqlFlavor, table: OutboxTable, ids: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('status')} = 'pending' WHERE ${f.idIn(b.bind, ids)} AND ${c('status')} = 'waiting'`,
  );
}

/** The keys among `keys` whose front is one of `ids`, with their front. */
export function frontsAmongStatement(f: SqlFlavor, table: OutboxTable, keys: string[], ids: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT ${c('key')}, ${c('front_id')} FROM ${f.byId(keysTableOf(table))} ` +
      `WHERE ${keyIn(f, b.bind, keys)} AND ${c('front_id')} IN (${list(b.bind, ids)})`,
  );
}

/** Those of `ids` that are not their key's front (a key whose row retention deleted has none). */
export function notFrontsStatement(f: SqlFlavor, table: OutboxTable, ids: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT e.${c('id')} FROM ${f.table(table)} e LEFT JOIN ${f.table(keysTableOf(table))} k ` +
      `ON k.${c('key')} = e.${c('key')} WHERE e.${f.idIn(b.bind, ids)} ` +
      `AND (k.${c('front_id')} IS NULL OR k.${c('front_id')} <> e.${c('id')})`,
  );
}

/** Puts an event at `place` in its key: its number, and pending as the key's front or waiting behind it. */
export function placeStatement(f: SqlFlavor, table: OutboxTable, id: string, place: KeyPlace): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('seq')} = ${b.bind(place.seq)}, ` +
      `${c('status')} = '${place.front ? 'pending' : 'waiting'}' WHERE ${c('id')} = ${b.bind(id)}`,
  );
}

/**
 * The dead events that are their key's front (`deadHead: 'block'`), oldest death first: from the dead
 * rows (the retention index) to their key's row, so a table of many keys costs nothing; with how many
 * events wait behind each, or (`countOnly`) only how many there are.
 */
export function blockedKeysStatement(f: SqlFlavor, table: OutboxTable, limit: number | 'count'): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const events = f.table(table);
  const from =
    `FROM ${events} e JOIN ${f.table(keysTableOf(table))} k ON k.${c('key')} = e.${c('key')} ` +
    `AND k.${c('front_id')} = e.${c('id')} WHERE e.${c('status')} = 'dead'`;
  if (limit === 'count') return b.statement(`SELECT COUNT(*) AS ${c('n')} ${from}`);
  const waiting = `SELECT COUNT(*) FROM ${byKey(f, table, 'w')} WHERE w.${c('key')} = e.${c('key')} AND w.${c('status')} = 'waiting'`;
  return b.statement(
    `SELECT e.${c('key')}, e.${c('id')}, e.${c('topic')}, e.${c('attempts')}, e.${c('last_error')}, e.${c('note')}, ` +
      `${f.timeText(`e.${c('processed_at')}`)} AS ${c('processed_at')}, (${waiting}) AS ${c('waiting')} ${from} ` +
      `ORDER BY e.${c('processed_at')}, e.${c('id')} LIMIT ${b.bind(limit)}`,
  );
}

/**
 * Deletes up to `batchSize` rows of idle keys (no unfinished event): a key's next publish writes its row
 * again, numbering from 1. Rows others hold are passed over, not waited for: a publisher holding an idle
 * key's row makes it not idle by its commit, and the delete reads `front_id` again on the row itself (a
 * row chosen by a subquery alone would be deleted from under the publisher's new front). Where a DELETE
 * cannot select from its own table (`lockThenDelete`), this selects and locks the rows, and
 * `deleteKeysStatement` deletes them.
 */
export function purgeIdleKeysStatement(f: SqlFlavor, table: OutboxTable, batchSize: number): Statement {
  const b = new StatementBuilder(f.placeholder);
  const keys = f.table(keysTableOf(table));
  const c = f.ident;
  const idle = `${c('front_id')} IS NULL`;
  const pick = `SELECT ${c('key')} FROM ${keys} WHERE ${idle} LIMIT ${b.bind(batchSize)}${f.forUpdate ? `${f.forUpdate} SKIP LOCKED` : ''}`;
  return b.statement(
    f.keyOrder.lockThenDelete ? pick : `DELETE FROM ${keys} WHERE ${idle} AND ${c('key')} IN (${pick})`,
  );
}

/**
 * Deletes the rows of `keys` (locked by `purgeIdleKeysStatement`, `lockThenDelete`) that are still idle,
 * found by primary key: a scan would wait for every key another transaction holds.
 */
export function deleteKeysStatement(f: SqlFlavor, table: OutboxTable, keys: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  return b.statement(
    `DELETE k FROM ${f.byId(keysTableOf(table), 'k')} WHERE ${keyIn(f, b.bind, keys, 'k.')} AND k.${f.ident('front_id')} IS NULL`,
  );
}

/**
 * For retention's selection of dead rows (the events' table as `r`): not a dead event that blocks its key
 * (its key's front, under `deadHead: 'block'`). Deleted by age, the events behind it would wait for ever
 * with nothing to show why; it stays until it is redriven or discarded. Nothing for delivered rows.
 */
export function keptHeads(f: SqlFlavor, table: OutboxTable, a: { status: string }): string {
  if (a.status !== 'dead') return '';
  const c = f.ident;
  return (
    ` AND NOT EXISTS (SELECT 1 FROM ${f.byId(keysTableOf(table), 'k')} ` +
    `WHERE k.${c('key')} = r.${c('key')} AND k.${c('front_id')} = r.${c('id')})`
  );
}

/**
 * Keys whose front is finished — delivered, dead, or gone — up to `limit`: left so by a crash between a
 * front's end and its move, by a worker of a version before per-key order, or by a dead head whose topic
 * now skips dead heads.
 */
export function finishedFrontsStatement(
  f: SqlFlavor,
  table: OutboxTable,
  limit: number,
  after: string | undefined,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const next = after === undefined ? '' : ` AND k.${c('key')} > ${b.bind(after)}`;
  return b.statement(
    `SELECT k.${c('key')}, k.${c('front_id')}, e.${c('status')}, e.${c('topic')} FROM ${f.table(keysTableOf(table))} k ` +
      `LEFT JOIN ${f.table(table)} e ON e.${c('id')} = k.${c('front_id')} WHERE k.${c('front_id')} IS NOT NULL ` +
      `AND (e.${c('id')} IS NULL OR e.${c('status')} IN ('delivered', 'dead'))${next} ` +
      `ORDER BY k.${c('key')} LIMIT ${b.bind(limit)}`,
  );
}

/**
 * Up to `limit` events waiting behind the event numbered `afterSeq` of `key`, in order, locked, each
 * with whether it may start now (`ready`: due, or its lease, from a run that died, has run out).
 */
export function followersStatement(
  f: SqlFlavor,
  table: OutboxTable,
  key: string,
  afterSeq: number,
  limit: number,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT ${c('id')}, ${c('attempts')}, CASE WHEN ${c('available_at')} <= ${f.now} THEN 1 ELSE 0 END AS ${c('ready')} ` +
      `FROM ${byKey(f, table, 'e')} WHERE ${c('key')} = ${b.bind(key)} AND ${c('status')} = 'waiting' ` +
      `AND ${c('seq')} > ${b.bind(afterSeq)} ORDER BY ${c('seq')} LIMIT ${b.bind(limit)}${f.forUpdate}`,
  );
}

/**
 * Leases waiting events to a claim's `token`, their attempt counted, as the claim leases its own: they
 * stay `waiting`, so a claim of another worker never takes them, and the next claim of their key's
 * front takes them back if this one dies.
 */
export function takeFollowersStatement(
  f: SqlFlavor,
  table: OutboxTable,
  ids: string[],
  token: string,
  leaseMs: number,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('claim_token')} = ${b.bind(token)}, ${c('available_at')} = ${f.later(b.bind, leaseMs)}, ` +
      `${c('attempts')} = ${c('attempts')} + 1, ${c('claimed_at')} = ${f.now} ` +
      `WHERE ${f.idIn(b.bind, ids)} AND ${c('status')} = 'waiting'`,
  );
}

/** The rows of `ids`, as a claim returns them. */
export function claimedRowsStatement(f: SqlFlavor, table: OutboxTable, ids: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  return b.statement(`SELECT ${f.columns} FROM ${f.byId(table)} WHERE ${f.idIn(b.bind, ids)}`);
}

/** The events as `alias`, read by key through the key-order index. */
function byKey(f: SqlFlavor, table: OutboxTable, alias: string): string {
  return f.keyOrder.byKey ? f.keyOrder.byKey(table, alias) : `${f.table(table)} ${alias}`;
}

function keyIn(f: SqlFlavor, bind: Bind, keys: string[], alias = ''): string {
  return `${alias}${f.ident('key')} IN (${list(bind, keys)})`;
}

function list(bind: Bind, values: string[]): string {
  return values.map((value) => bind(value)).join(', ');
}
