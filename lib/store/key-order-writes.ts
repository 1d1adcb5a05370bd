import {
  claimedRowsStatement,
  claimKeysStatement,
  followersStatement,
  takeFollowersStatement,
  finishedFrontsStatement,
  frontsAmongStatement,
  keyRowsStatement,
  notFrontsStatement,
  placeStatement,
  lockKeysStatement,
  moveFrontsStatement,
  PARAMETERS_PER_KEY,
  frontsOfStatement,
  promoteStatement,
  purgeIdleKeysStatement,
  deleteKeysStatement,
} from '../dialects/shared/key-order-statements';
import type { KeyPlace } from '../dialects/shared/insert-statement';
import type { KeyClaim } from '../dialects/shared/key-order-statements';
import type {
  OutboxDialect,
  SqlExecutor,
  SqlFlavor,
  Statement,
  StatementResult,
} from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';

/** An event to give a place in its key: its id, its key, and the place once given. */
export interface Placing {
  id: string;
  event: { key: string | null };
  place?: KeyPlace;
}

/** One statement in the transaction at hand. */
export type RunStatement = (statement: Statement) => Promise<StatementResult>;

/**
 * Keys in the order their rows are locked everywhere: by code point, which is the byte order of their
 * UTF-8 (MySQL's binary collations, SQLite's, PostgreSQL's "C"). Two transactions that lock keys in
 * one order cannot each wait for the other's.
 */
export function sortKeys(keys: Iterable<string>): string[] {
  return [...new Set(keys)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/**
 * Gives each of `rows` (events of ordered topics with a key, in publish order) its place in its key, in
 * the caller's transaction: the key's next numbers, and whether it is the key's front. The keys' rows
 * stay locked to the caller's commit, so a key's numbers follow its publishers' commit order.
 */
export async function placeInKeys(
  run: RunStatement,
  dialect: OutboxDialect,
  table: OutboxTable,
  rows: Placing[],
): Promise<void> {
  const byKey = new Map<string, Placing[]>();
  for (const row of rows) {
    const key = row.event.key!;
    const list = byKey.get(key);
    if (list) list.push(row);
    else byKey.set(key, [row]);
  }
  const keys = sortKeys(byKey.keys());
  const f = dialect.flavor;
  const perStatement = Math.floor(dialect.maxParameters / PARAMETERS_PER_KEY);
  for (let i = 0; i < keys.length; i += perStatement) {
    const chunk = keys.slice(i, i + perStatement);
    const claims = chunk.map((key) => ({ key, count: byKey.get(key)!.length, firstId: byKey.get(key)![0].id }));
    const one = chunk.length === 1 && f.keyOrder.reportOne !== undefined;
    const upserted = await run(claimKeysStatement(f, table, claims, one));
    const stored =
      (one ? reportedRows(claims[0], upserted.insertId) : undefined) ??
      (f.keyOrder.returning ? upserted.rows : (await run(keyRowsStatement(f, table, chunk))).rows);
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
 * The row of one key as its upsert reported it (`keyOrder.reportOne`): none reported is a new row; else
 * its last number, and its front where the key had none. Undefined where the driver reports no id.
 */
function reportedRows(claim: KeyClaim, insertId: number | undefined): Record<string, unknown>[] | undefined {
  if (insertId === undefined) return undefined;
  if (insertId === 0) return [{ key: claim.key, last_seq: claim.count, front_id: claim.firstId }];
  return [{ key: claim.key, last_seq: Math.floor(insertId / 2), front_id: insertId % 2 === 1 ? claim.firstId : null }];
}

/**
 * In a transaction that holds the rows of `keys` (see `lockKeys`): moves the fronts that are among
 * `finished` and no longer pending or waiting to the next waiting event of their key, and makes those
 * claimable. Returns how many became claimable.
 */
export async function moveFronts(
  run: RunStatement,
  f: SqlFlavor,
  table: OutboxTable,
  keys: string[],
  finished: string[],
): Promise<number> {
  if (keys.length === 0 || finished.length === 0) return 0;
  const move = moveFrontsStatement(f, table, keys, finished);
  let fronts: string[];
  if (f.keyOrder.returning) {
    // The move returns the keys' new fronts.
    const { rows } = await run({ ...move, sql: f.keyOrder.returning(move.sql) });
    fronts = rows.filter((row) => row.front_id !== null).map((row) => String(row.front_id));
  } else {
    if ((await run(move)).affected === 0) return 0;
    fronts = (await run(frontsOfStatement(f, table, keys))).rows.map((row) => String(row.front_id));
  }
  // Made claimable by id: those that wait (a front that did not move is pending already).
  return fronts.length === 0 ? 0 : (await run(promoteStatement(f, table, fronts))).affected;
}

/** Locks the rows of `keys` in the transaction, in the order every writer locks them. */
export async function lockKeys(run: RunStatement, f: SqlFlavor, table: OutboxTable, keys: string[]): Promise<void> {
  const statement = keys.length > 0 ? lockKeysStatement(f, table, keys) : undefined;
  if (statement) await run(statement);
}

/**
 * Writes a fenced outcome (`outcome`) that finishes `finished`, events of ordered `keys`, in one
 * transaction with the move of their keys' fronts: the keys' rows locked first, then the outcome, then
 * the fronts. Returns the outcome's affected rows and how many events became claimable.
 */
export function finishInOrder(
  executor: SqlExecutor,
  f: SqlFlavor,
  table: OutboxTable,
  keys: string[],
  outcome: Statement,
  finished: string[],
): Promise<{ affected: number; promoted: number }> {
  return executor.transaction(async (run) => {
    await lockKeys(run, f, table, keys);
    const { affected } = await run(outcome);
    const promoted = affected > 0 ? await moveFronts(run, f, table, keys, finished) : 0;
    return { affected, promoted };
  });
}

/** An event of an ordered key, by id. */
export interface KeyedEvent {
  id: string;
  key: string;
}

/**
 * After a discard of dead events of ordered keys, in its transaction: the keys whose front was one of
 * them go on with their next event. Returns those fronts: their keys are no longer blocked.
 */
export async function unblockKeys(
  run: RunStatement,
  f: SqlFlavor,
  table: OutboxTable,
  events: KeyedEvent[],
): Promise<KeyedEvent[]> {
  const keys = sortKeys(events.map((e) => e.key));
  const ids = events.map((e) => e.id);
  await lockKeys(run, f, table, keys);
  const { rows } = await run(frontsAmongStatement(f, table, keys, ids));
  await moveFronts(run, f, table, keys, ids);
  return rows.map((row) => ({ key: String(row.key), id: String(row.front_id) }));
}

/**
 * After a redrive of dead events of ordered keys, in its transaction: a key's front stays its front
 * (the key resumes with it, and is no longer blocked: those are returned); any other (passed over under
 * `skip`) goes to the back of its key, behind the events published since, or becomes the front of a key
 * with none.
 */
export async function requeueInKeys(
  run: RunStatement,
  dialect: OutboxDialect,
  table: OutboxTable,
  events: KeyedEvent[],
): Promise<KeyedEvent[]> {
  const f = dialect.flavor;
  await lockKeys(run, f, table, sortKeys(events.map((e) => e.key)));
  const ids = events.map((e) => e.id);
  const behind = new Set((await run(notFrontsStatement(f, table, ids))).rows.map((row) => String(row.id)));
  const placing: Placing[] = events.filter((e) => behind.has(e.id)).map((e) => ({ id: e.id, event: { key: e.key } }));
  if (placing.length > 0) await placeInKeys(run, dialect, table, placing);
  for (const p of placing) await run(placeStatement(f, table, p.id, p.place!));
  return events.filter((e) => !behind.has(e.id));
}

/** Keys a sweep reads per statement. */
const SWEEP_PAGE = 500;

/**
 * Moves on the keys whose front finished without its key moving on (see `finishedFrontsStatement`):
 * a dead front only where `skips(topic)`. Returns how many keys moved on.
 */
export async function sweepFinishedFronts(
  executor: SqlExecutor,
  f: SqlFlavor,
  table: OutboxTable,
  skips: (topic: string) => boolean,
): Promise<number> {
  let moved = 0;
  let after: string | undefined;
  for (;;) {
    const { rows } = await executor.run(finishedFrontsStatement(f, table, SWEEP_PAGE, after));
    const stuck = rows.filter((row) => row.status !== 'dead' || skips(String(row.topic)));
    if (stuck.length > 0) {
      const keys = sortKeys(stuck.map((row) => String(row.key)));
      const fronts = stuck.map((row) => String(row.front_id));
      await executor.transaction(async (run) => {
        await lockKeys(run, f, table, keys);
        await moveFronts(run, f, table, keys, fronts);
      });
      moved += stuck.length;
    }
    if (rows.length < SWEEP_PAGE) return moved;
    after = String(rows[rows.length - 1].key);
  }
}

/**
 * A claim's runs (per-key order): behind each of `fronts` (claimed events of ordered keys), up to an
 * equal share of `budget` of the events waiting next in its key, consecutive, while each may start now
 * and has an attempt left; leased to the claim's `token` in one transaction. Returns them by front, in
 * order, as raw rows to decode.
 */
export async function takeFollowers(
  executor: SqlExecutor,
  f: SqlFlavor,
  table: OutboxTable,
  claim: { token: string; leaseMs: number; maxAttempts: number },
  fronts: Array<{ id: string; key: string; seq: number }>,
  budget: number,
): Promise<Map<string, Record<string, unknown>[]>> {
  const share = Math.floor(budget / fronts.length);
  const byFront = new Map<string, Record<string, unknown>[]>();
  if (share < 1) return byFront;
  const rows = await executor.transaction(async (run) => {
    const ids = new Map<string, string[]>();
    for (const front of fronts) {
      const { rows: next } = await run(followersStatement(f, table, front.key, front.seq, share));
      const taken: string[] = [];
      for (const row of next) {
        if (Number(row.ready) !== 1 || Number(row.attempts) >= claim.maxAttempts) break;
        taken.push(String(row.id));
      }
      if (taken.length > 0) ids.set(front.id, taken);
    }
    const all = [...ids.values()].flat();
    if (all.length === 0) return { ids, found: [] };
    await run(takeFollowersStatement(f, table, all, claim.token, claim.leaseMs));
    return { ids, found: (await run(claimedRowsStatement(f, table, all))).rows };
  });
  const found = new Map(rows.found.map((row) => [String(row.id), row]));
  for (const [front, ids] of rows.ids)
    byFront.set(
      front,
      ids.map((id) => found.get(id)!),
    );
  return byFront;
}

/** Deletes up to `batchSize` rows of ordered keys with nothing unfinished (see `purgeIdleKeysStatement`); returns how many. */
export async function purgeIdleKeys(
  executor: SqlExecutor,
  f: SqlFlavor,
  table: OutboxTable,
  batchSize: number,
): Promise<number> {
  const statement = purgeIdleKeysStatement(f, table, batchSize);
  if (!f.keyOrder.lockThenDelete) return (await executor.run(statement)).affected;
  return executor.transaction(async (run) => {
    const keys = (await run(statement)).rows.map((row) => String(row.key));
    return keys.length === 0 ? 0 : (await run(deleteKeysStatement(f, table, keys))).affected;
  });
}
