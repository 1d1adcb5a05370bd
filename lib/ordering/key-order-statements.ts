import type { KeyPlace } from '../dialects/shared/insert-statement';
import type { KeyReservation } from '../dialects/shared/key-order-sql';
import type { Bind, SqlFlavor, Statement } from '../dialects/shared/outbox-dialect.interface';
import { keysTableOf, type OutboxTable } from '../dialects/shared/outbox-table';
import { StatementBuilder } from '../dialects/shared/statement-builder';

/** The parameters one key binds in the keys' upsert. */
export const PARAMETERS_PER_KEY = 3;

/**
 * Per-key order's statements (see docs/internals/ordering.md), written once for every database and bound to one
 * outbox table and its database's flavor: the keys' table hands out each key's numbers at publish, and
 * names each key's front, the one event of the key that may be claimed.
 */
export class KeyOrderStatements {
  constructor(
    private readonly f: SqlFlavor,
    private readonly table: OutboxTable,
  ) {}

  private c(name: string): string {
    return this.f.ident(name);
  }

  /** The keys' table, found by primary key (as `alias`). */
  private keysById(alias?: string): string {
    return this.f.byId(keysTableOf(this.table), alias);
  }

  /**
   * Reserves `count` numbers for each key and makes `firstId` its front where it has none, in one upsert
   * that locks each key's row to the caller's commit (so a key's numbers follow commit order). Returns the
   * keys' rows (key, last_seq, front_id) where the database can; else `one` reports the row of a lone key
   * (`keyOrder.reserveOne`), or read them with `keyRows`.
   */
  reserve(reservations: KeyReservation[], one = false): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const values = reservations.map((r) => `(${b.bind(r.key)}, ${f.integer(b.bind(r.count))}, ${b.bind(r.firstId)})`);
    const into = f.keyOrder.into ?? ((keys: string) => keys);
    const upsert =
      `INSERT INTO ${into(f.table(keysTableOf(this.table)))} (${this.c('key')}, ${this.c('last_seq')}, ${this.c('front_id')}) ` +
      `VALUES ${values.join(', ')}${one ? f.keyOrder.reserveOne!.upsert : f.keyOrder.upsert}`;
    return b.statement(this.returning(upsert, ...['key', 'last_seq', 'front_id'].map((name) => this.c(name))));
  }

  /** The rows of `keys`: the last number each handed out, and its front. */
  keyRows(keys: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    return b.statement(
      `SELECT ${c('key')}, ${c('last_seq')}, ${c('front_id')} FROM ${this.keysById()} WHERE ${this.keyIn(b.bind, keys)}`,
    );
  }

  /**
   * Locks the rows of `keys`, in the order publishers lock them (so two transactions never wait for each
   * other's keys: see `sortKeys`), and no other row, before a front moves: the statements after it see
   * every publisher of these keys that committed meanwhile. Undefined where one writer at a time holds
   * the whole database (SQLite).
   */
  lockKeys(keys: string[]): Statement | undefined {
    const { f } = this;
    if (f.forUpdate === '') return undefined;
    const b = new StatementBuilder(f.placeholder);
    return b.statement(
      `SELECT ${this.c('key')} FROM ${this.keysById()} WHERE ${this.keyIn(b.bind, keys)} ` +
        `ORDER BY ${f.keyOrder.byteOrder ?? this.c('key')}${f.forUpdate}`,
    );
  }

  /**
   * Moves the front of those of `keys` whose front is one of `finished` and no longer pending or waiting
   * (acknowledged, dead and skipped, discarded, or never written): to the lowest waiting event of the key,
   * or to none. A front still unfinished (the fenced write was refused) stays.
   */
  moveFronts(keys: string[], finished: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(this.move(b.bind, keys, finished));
  }

  /**
   * `moveFronts`, then `promote` of the fronts it moved to, in one statement where a write may feed
   * another (`keyOrder.writesInWith`): undefined elsewhere.
   */
  moveAndPromote(keys: string[], finished: string[]): Statement | undefined {
    if (!this.f.keyOrder.writesInWith) return undefined;
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    const moved = this.returning(this.move(b.bind, keys, finished), c('front_id'));
    return b.statement(
      `WITH moved AS (${moved}) ${this.promotion(`${c('id')} IN (SELECT ${c('front_id')} FROM moved)`)}`,
    );
  }

  private move(bind: Bind, keys: string[], finished: string[]): string {
    const c = (name: string) => this.c(name);
    const next =
      `SELECT e.${c('id')} FROM ${this.byKey('e')} WHERE e.${c('key')} = k.${c('key')} AND e.${c('status')} = 'waiting' ` +
      `ORDER BY e.${c('seq')} LIMIT 1`;
    const open =
      `SELECT 1 FROM ${this.f.table(this.table)} o WHERE o.${c('id')} = k.${c('front_id')} ` +
      `AND o.${c('status')} IN ('pending', 'waiting')`;
    return (
      `UPDATE ${this.keysById('k')} SET ${c('front_id')} = (${next}) ` +
      `WHERE ${this.keyIn(bind, keys, 'k.')} AND k.${c('front_id')} IN (${list(bind, finished)}) ` +
      `AND NOT EXISTS (${open})`
    );
  }

  /**
   * The fronts of `keys`, where the move cannot return them (MySQL): a plain read of rows the transaction
   * holds, made claimable by id with `promote`. One UPDATE joining the keys to their fronts read the keys'
   * table whole on a table of few keys, waiting for the rows other transactions held: acks and publishers
   * then deadlocked.
   */
  frontsOf(keys: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `SELECT ${this.c('front_id')} FROM ${this.keysById()} ` +
        `WHERE ${this.keyIn(b.bind, keys)} AND ${this.c('front_id')} IS NOT NULL`,
    );
  }

  /**
   * Makes those of `ids` that wait claimable (they are their keys' new fronts), reporting of each whether
   * it is due now (`due`: neither delayed, nor backing off, nor held by the run of the claim that moved its
   * key on): where the database can, as rows; else as the statement's insert id (`keyOrder.promotedDue`).
   */
  promote(ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(this.promotion(this.f.idIn(b.bind, ids)));
  }

  /** The promotion of the events `which` (a condition) selects. */
  private promotion(which: string): string {
    const { f } = this;
    const c = (name: string) => this.c(name);
    const promote =
      `UPDATE ${f.byId(this.table)} SET ${c('status')} = 'pending'${f.keyOrder.promotedDue?.set ?? ''} ` +
      `WHERE ${which} AND ${c('status')} = 'waiting'`;
    const due = `CASE WHEN ${c('available_at')} <= ${f.now} THEN 1 ELSE 0 END AS ${c('due')}`;
    return this.returning(promote, due);
  }

  /** The keys among `keys` whose front is one of `ids`, with their front. */
  frontsAmong(keys: string[], ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `SELECT ${this.c('key')}, ${this.c('front_id')} FROM ${this.keysById()} ` +
        `WHERE ${this.keyIn(b.bind, keys)} AND ${this.c('front_id')} IN (${list(b.bind, ids)})`,
    );
  }

  /** Those of `ids` that are not their key's front (a key whose row retention deleted has none). */
  notFronts(ids: string[]): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const c = (name: string) => this.c(name);
    return b.statement(
      `SELECT e.${c('id')} FROM ${f.table(this.table)} e LEFT JOIN ${f.table(keysTableOf(this.table))} k ` +
        `ON k.${c('key')} = e.${c('key')} WHERE e.${f.idIn(b.bind, ids)} ` +
        `AND (k.${c('front_id')} IS NULL OR k.${c('front_id')} <> e.${c('id')})`,
    );
  }

  /** Puts an event at `place` in its key: its number, and pending as the key's front or waiting behind it. */
  place(id: string, place: KeyPlace): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    return b.statement(
      `UPDATE ${this.f.byId(this.table)} SET ${c('seq')} = ${b.bind(place.seq)}, ` +
        `${c('status')} = '${place.front ? 'pending' : 'waiting'}' WHERE ${c('id')} = ${b.bind(id)}`,
    );
  }

  /**
   * The dead events that are their key's front (`deadHead: 'block'`), oldest death first: from the dead
   * rows (the retention index) to their key's row, so a table of many keys costs nothing; with how many
   * events wait behind each, or (`'count'`) only how many there are.
   */
  blockedKeys(limit: number | 'count'): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const c = (name: string) => this.c(name);
    const from =
      `FROM ${f.table(this.table)} e JOIN ${f.table(keysTableOf(this.table))} k ON k.${c('key')} = e.${c('key')} ` +
      `AND k.${c('front_id')} = e.${c('id')} WHERE e.${c('status')} = 'dead'`;
    if (limit === 'count') return b.statement(`SELECT COUNT(*) AS ${c('n')} ${from}`);
    const waiting = `SELECT COUNT(*) FROM ${this.byKey('w')} WHERE w.${c('key')} = e.${c('key')} AND w.${c('status')} = 'waiting'`;
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
   * `deleteKeys` deletes them.
   */
  purgeIdleKeys(batchSize: number): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const keys = f.table(keysTableOf(this.table));
    const idle = `${this.c('front_id')} IS NULL`;
    const pick = `SELECT ${this.c('key')} FROM ${keys} WHERE ${idle} LIMIT ${b.bind(batchSize)}${f.forUpdate ? `${f.forUpdate} SKIP LOCKED` : ''}`;
    return b.statement(
      f.keyOrder.lockThenDelete ? pick : `DELETE FROM ${keys} WHERE ${idle} AND ${this.c('key')} IN (${pick})`,
    );
  }

  /**
   * Deletes the rows of `keys` (locked by `purgeIdleKeys`, `lockThenDelete`) that are still idle, found by
   * primary key: a scan would wait for every key another transaction holds.
   */
  deleteKeys(keys: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `DELETE k FROM ${this.keysById('k')} WHERE ${this.keyIn(b.bind, keys, 'k.')} AND k.${this.c('front_id')} IS NULL`,
    );
  }

  /**
   * For retention's selection of rows of `status` (the events' table as `r`), the condition that keeps
   * a dead event that blocks its key (its key's front, under `deadHead: 'block'`). Deleted by age, the
   * events behind it would wait for ever with nothing to show why; it stays until it is redriven or
   * discarded. None for delivered rows.
   */
  keptHeads(status: string): string | undefined {
    if (status !== 'dead') return undefined;
    const c = (name: string) => this.c(name);
    return (
      `EXISTS (SELECT 1 FROM ${this.keysById('k')} ` +
      `WHERE k.${c('key')} = r.${c('key')} AND k.${c('front_id')} = r.${c('id')})`
    );
  }

  /**
   * Keys whose front is finished — delivered, dead, or gone — up to `limit`: left so by a crash between a
   * front's end and its move, by a worker of a version before per-key order, or by a dead head whose topic
   * now skips dead heads.
   */
  finishedFronts(limit: number, after: string | undefined): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const c = (name: string) => this.c(name);
    const next = after === undefined ? '' : ` AND k.${c('key')} > ${b.bind(after)}`;
    return b.statement(
      `SELECT k.${c('key')}, k.${c('front_id')}, e.${c('status')}, e.${c('topic')} FROM ${f.table(keysTableOf(this.table))} k ` +
        `LEFT JOIN ${f.table(this.table)} e ON e.${c('id')} = k.${c('front_id')} WHERE k.${c('front_id')} IS NOT NULL ` +
        `AND (e.${c('id')} IS NULL OR e.${c('status')} IN ('delivered', 'dead'))${next} ` +
        `ORDER BY k.${c('key')} LIMIT ${b.bind(limit)}`,
    );
  }

  /** `write` made to return `columns` (SQL expressions), where the database can (`keyOrder.returning`). */
  returning(write: string, ...columns: string[]): string {
    const { returning } = this.f.keyOrder;
    return returning ? returning(write, columns.join(', ')) : write;
  }

  /** The events as `alias`, read by key through the key-order index. */
  byKey(alias: string): string {
    const { f } = this;
    return f.keyOrder.byKey ? f.keyOrder.byKey(this.table, alias) : `${f.table(this.table)} ${alias}`;
  }

  private keyIn(bind: Bind, keys: string[], alias = ''): string {
    return `${alias}${this.c('key')} IN (${list(bind, keys)})`;
  }
}

function list(bind: Bind, values: string[]): string {
  return values.map((value) => bind(value)).join(', ');
}
