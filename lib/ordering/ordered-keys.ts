import type { KeyPlace } from '../dialects/shared/insert-statement';
import type { KeyReservation, KeyRow } from '../dialects/shared/key-order-sql';
import type {
  OutboxDialect,
  SqlExecutor,
  Statement,
  StatementResult,
} from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import type { ResolvedKeyOrder } from '../interfaces/outbox-ordering.interface';
import { KeyOrderStatements, PARAMETERS_PER_KEY } from './key-order-statements';
import { KeyRuns } from './key-runs';

/** An event to give a place in its key: its id, its key, and the place once given. */
export interface Placing {
  id: string;
  event: { key: string | null };
  place?: KeyPlace;
}

/** An event of an ordered key, by id. */
export interface KeyedEvent {
  id: string;
  key: string;
}

/** What a move of fronts made claimable: how many events, and whether one of them is due now. */
export interface Promotion {
  promoted: number;
  due: boolean;
}

const NONE: Promotion = { promoted: 0, due: false };

/** One statement in the transaction at hand. */
export type RunStatement = (statement: Statement) => Promise<StatementResult>;

/** Keys a sweep reads per statement. */
const SWEEP_PAGE = 500;

/**
 * Keys in the order their rows are locked everywhere: by code point, which is the byte order of their
 * UTF-8 (MySQL's binary collations, SQLite's, PostgreSQL's "C"). Two transactions that lock keys in
 * one order cannot each wait for the other's.
 */
export function sortKeys(keys: Iterable<string>): string[] {
  return [...new Set(keys)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/**
 * Per-key order on one outbox table (see docs/internals/ordering.md): which events are ordered (the `ordering`
 * option), the keys' table and every write that keeps a key's events in order — the numbers reserved at
 * publish, the front moved when it finishes, the runs a claim takes, the sweep at start-up, retention
 * and the operations' redrive and discard. Owned by the table's `OutboxStore`; the statements are
 * `KeyOrderStatements`, through the database's flavor of SQL.
 */
export class OrderedKeys {
  readonly statements: KeyOrderStatements;
  /** The runs a claim takes behind the fronts it claimed. */
  readonly runs: KeyRuns;

  constructor(
    private readonly dialect: Pick<OutboxDialect, 'flavor' | 'maxParameters'>,
    table: OutboxTable,
    /** The worker's way to the database, for the writes that are transactions of their own. */
    private readonly executor: SqlExecutor,
    /** The `ordering` option. */
    readonly rules: ResolvedKeyOrder,
  ) {
    this.statements = new KeyOrderStatements(dialect.flavor, table);
    this.runs = new KeyRuns(dialect.flavor, table, executor, this.statements);
  }

  /** Whether any topic is ordered: without, publishing never touches the keys' table. */
  get enabled(): boolean {
    return this.rules.enabled;
  }

  /** Whether an event of `topic` with `key` takes its place in its key's order. */
  orders(topic: string, key: string | null): key is string {
    return this.rules.orders(topic, key);
  }

  /**
   * Gives each of `rows` (events of ordered topics with a key, in publish order) its place in its key, in
   * the caller's transaction: the key's next numbers, reserved, and whether it is the key's front. The
   * keys' rows stay locked to the caller's commit, so a key's numbers follow its publishers' commit order.
   */
  async place(run: RunStatement, rows: Placing[]): Promise<void> {
    const byKey = new Map<string, Placing[]>();
    for (const row of rows) {
      const key = row.event.key!;
      const list = byKey.get(key);
      if (list) list.push(row);
      else byKey.set(key, [row]);
    }
    const keys = sortKeys(byKey.keys());
    const { reserveOne, returning } = this.dialect.flavor.keyOrder;
    const perStatement = Math.floor(this.dialect.maxParameters / PARAMETERS_PER_KEY);
    for (let i = 0; i < keys.length; i += perStatement) {
      const chunk = keys.slice(i, i + perStatement);
      const reservations: KeyReservation[] = chunk.map((key) => {
        const placing = byKey.get(key)!;
        return { key, count: placing.length, firstId: placing[0].id };
      });
      const one = chunk.length === 1 && reserveOne !== undefined;
      const reserved = await run(this.statements.reserve(reservations, one));
      const stored: Array<KeyRow | Record<string, unknown>> =
        one && reserved.insertId !== undefined
          ? [reserveOne.read(reservations[0], reserved.insertId)]
          : returning
            ? reserved.rows
            : (await run(this.statements.keyRows(chunk))).rows;
      for (const row of stored) {
        const placed = byKey.get(String(row.key));
        if (!placed) continue;
        const first = Number(row.last_seq) - placed.length + 1;
        const front = row.front_id as string | null;
        placed.forEach((p, n) => (p.place = { seq: first + n, front: p.id === front }));
      }
    }
    const unplaced = rows.find((row) => row.place === undefined);
    if (unplaced) {
      throw new Error(`the outbox could not read back the order of key "${unplaced.event.key}" after writing it`);
    }
  }

  /**
   * In a transaction that holds the rows of `keys` (see `lockKeys`): moves the fronts that are among
   * `finished` and no longer pending or waiting to the next waiting event of their key, and makes those
   * claimable. Reports what it promoted: an event held by the run of the claim that moved its key on is
   * not due, and wakes nobody.
   */
  async moveFronts(run: RunStatement, keys: string[], finished: string[]): Promise<Promotion> {
    if (keys.length === 0 || finished.length === 0) return NONE;
    const move = this.statements.moveFronts(keys, finished);
    let fronts: string[];
    if (this.dialect.flavor.keyOrder.returning) {
      // The move returns the keys' new fronts.
      const { rows } = await run({ ...move, sql: this.statements.returning(move.sql, 'front_id') });
      fronts = rows.filter((row) => row.front_id !== null).map((row) => String(row.front_id));
    } else {
      if ((await run(move)).affected === 0) return NONE;
      fronts = (await run(this.statements.frontsOf(keys))).rows.map((row) => String(row.front_id));
    }
    if (fronts.length === 0) return NONE;
    // Made claimable by id: those that wait (a front that did not move is pending already).
    const { rows, affected, insertId } = await run(this.statements.promote(fronts));
    const { promotedDue } = this.dialect.flavor.keyOrder;
    if (promotedDue) return { promoted: affected, due: insertId === undefined || promotedDue.read(insertId) };
    return { promoted: rows.length, due: rows.some((row) => Number(row.due) === 1) };
  }

  /** Locks the rows of `keys` in the transaction, in the order every writer locks them. */
  async lockKeys(run: RunStatement, keys: string[]): Promise<void> {
    const statement = keys.length > 0 ? this.statements.lockKeys(keys) : undefined;
    if (statement) await run(statement);
  }

  /**
   * Writes a fenced outcome (`outcome`) that finishes `finished`, events of ordered `keys`, in one
   * transaction with the move of their keys' fronts: the keys' rows locked first, then the outcome, then
   * the fronts. Returns the outcome's affected rows and what the move promoted.
   */
  async finish(keys: string[], outcome: Statement, finished: string[]): Promise<{ affected: number } & Promotion> {
    const sorted = sortKeys(keys);
    const inOneTrip = await this.inOneTrip(sorted, finished, outcome);
    if (inOneTrip) return { affected: inOneTrip.written!.affected, ...inOneTrip.promotion };
    return this.executor.transaction(async (run) => {
      await this.lockKeys(run, sorted);
      const { affected } = await run(outcome);
      return { affected, ...(affected > 0 ? await this.moveFronts(run, sorted, finished) : NONE) };
    });
  }

  /** Moves the fronts of `keys` that are among `finished` and no longer pending or waiting, in a transaction of its own. */
  async moveOn(keys: string[], finished: string[]): Promise<Promotion> {
    const sorted = sortKeys(keys);
    const inOneTrip = await this.inOneTrip(sorted, finished);
    if (inOneTrip) return inOneTrip.promotion;
    return this.executor.transaction(async (run) => {
      await this.lockKeys(run, sorted);
      return this.moveFronts(run, sorted, finished);
    });
  }

  /**
   * `finish` (with `outcome`) or `moveOn` as one round trip, where the database runs a script and the move
   * promotes in the same statement (PostgreSQL): the keys locked, the outcome, the move. The move needs
   * nothing from the outcome: where a fenced outcome was refused, its event is still pending and no front
   * moves. Undefined elsewhere, or with no key.
   */
  private async inOneTrip(
    sorted: string[],
    finished: string[],
    outcome?: Statement,
  ): Promise<{ written?: StatementResult; promotion: Promotion } | undefined> {
    const { script } = this.executor;
    const move = script && sorted.length > 0 ? this.statements.moveAndPromote(sorted, finished) : undefined;
    const lock = this.statements.lockKeys(sorted);
    if (!move || !lock) return undefined;
    const results = await script!(outcome ? [lock, outcome, move] : [lock, move]);
    const { rows } = results[results.length - 1];
    const promotion = { promoted: rows.length, due: rows.some((row) => Number(row.due) === 1) };
    return { written: outcome && results[1], promotion };
  }

  /**
   * After a discard of dead events of ordered keys, in its transaction: the keys whose front was one of
   * them go on with their next event. Returns those fronts: their keys are no longer blocked.
   */
  async unblock(run: RunStatement, events: KeyedEvent[]): Promise<KeyedEvent[]> {
    const keys = sortKeys(events.map((e) => e.key));
    const ids = events.map((e) => e.id);
    await this.lockKeys(run, keys);
    const { rows } = await run(this.statements.frontsAmong(keys, ids));
    await this.moveFronts(run, keys, ids);
    return rows.map((row) => ({ key: String(row.key), id: String(row.front_id) }));
  }

  /**
   * After a redrive of dead events of ordered keys (which left them waiting), in its transaction: a key's
   * front stays its front and is made pending (the key resumes with it, and is no longer blocked: those
   * are returned); any other (passed over under `skip`) goes to the back of its key, behind the events
   * published since, or becomes the front of a key with none. The fronts first, then the others: at no
   * statement has a key two pending events (the index of schema version 9 refuses it).
   */
  async requeue(run: RunStatement, events: KeyedEvent[]): Promise<KeyedEvent[]> {
    await this.lockKeys(run, sortKeys(events.map((e) => e.key)));
    const ids = events.map((e) => e.id);
    const behind = new Set((await run(this.statements.notFronts(ids))).rows.map((row) => String(row.id)));
    const fronts = events.filter((e) => !behind.has(e.id));
    if (fronts.length > 0) await run(this.statements.promote(fronts.map((e) => e.id)));
    const placing: Placing[] = events.filter((e) => behind.has(e.id)).map((e) => ({ id: e.id, event: { key: e.key } }));
    if (placing.length > 0) await this.place(run, placing);
    for (const p of placing) await run(this.statements.place(p.id, p.place!));
    return fronts;
  }

  /**
   * Moves on the keys whose front finished without its key moving on (see `finishedFronts`): a dead
   * front only where its topic skips dead heads (now). Returns how many keys moved on.
   */
  async sweep(): Promise<number> {
    let moved = 0;
    let after: string | undefined;
    for (;;) {
      const { rows } = await this.executor.run(this.statements.finishedFronts(SWEEP_PAGE, after));
      const stuck = rows.filter((row) => row.status !== 'dead' || this.rules.skipsDeadHead(String(row.topic)));
      if (stuck.length > 0) {
        await this.moveOn(
          stuck.map((row) => String(row.key)),
          stuck.map((row) => String(row.front_id)),
        );
        moved += stuck.length;
      }
      if (rows.length < SWEEP_PAGE) return moved;
      after = String(rows[rows.length - 1].key);
    }
  }

  /** Deletes up to `batchSize` rows of keys with nothing unfinished (see `purgeIdleKeys`); returns how many. */
  async purgeIdle(batchSize: number): Promise<number> {
    const statement = this.statements.purgeIdleKeys(batchSize);
    if (!this.dialect.flavor.keyOrder.lockThenDelete) return (await this.executor.run(statement)).affected;
    return this.executor.transaction(async (run) => {
      const keys = (await run(statement)).rows.map((row) => String(row.key));
      return keys.length === 0 ? 0 : (await run(this.statements.deleteKeys(keys))).affected;
    });
  }
}
