import type { SqlExecutor, SqlFlavor, Statement } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import { StatementBuilder } from '../dialects/shared/statement-builder';
import type { KeyOrderStatements } from './key-order-statements';

/** What a claim leases, as runs are leased with it. */
export interface RunLease {
  token: string;
  leaseMs: number;
  maxAttempts: number;
}

/**
 * Per-key order's runs (see docs/internals/ordering.md): the events waiting next behind the fronts a claim
 * took, leased with it so one lane delivers a key's events one after another. Owned by `OrderedKeys`.
 */
export class KeyRuns {
  constructor(
    private readonly f: SqlFlavor,
    private readonly table: OutboxTable,
    /** The worker's way to the database: the runs are leased in a transaction of their own. */
    private readonly executor: SqlExecutor,
    private readonly keyOrder: KeyOrderStatements,
  ) {}

  /**
   * A claim's runs: behind each of `fronts` (claimed events of ordered keys), up to an equal share of
   * `budget` of the events waiting next in its key, consecutive, while each may start now and has an
   * attempt left; leased with the claim in one transaction. Only while the fronts are fewer than the
   * worker's `lanes`: with as many or more, every lane has a front, and each step of a run would be an
   * acknowledgement of its own where fronts are acknowledged together. Returns them by front, in order,
   * as raw rows to decode.
   */
  async take(
    lease: RunLease,
    fronts: Array<{ id: string; key: string; seq: number }>,
    budget: number,
    lanes = Infinity,
  ): Promise<Map<string, Record<string, unknown>[]>> {
    const byFront = new Map<string, Record<string, unknown>[]>();
    if (fronts.length === 0 || fronts.length >= lanes) return byFront;
    const share = Math.floor(budget / fronts.length);
    if (share < 1) return byFront;
    const rows = await this.executor.transaction(async (run) => {
      const ids = new Map<string, string[]>();
      for (const front of fronts) {
        const { rows: next } = await run(this.followers(front.key, front.seq, share));
        const taken: string[] = [];
        for (const row of next) {
          if (Number(row.ready) !== 1 || Number(row.attempts) >= lease.maxAttempts) break;
          taken.push(String(row.id));
        }
        if (taken.length > 0) ids.set(front.id, taken);
      }
      const all = [...ids.values()].flat();
      if (all.length === 0) return { ids, found: [] };
      await run(this.takeFollowers(all, lease.token, lease.leaseMs));
      return { ids, found: (await run(this.claimedRows(all))).rows };
    });
    const found = new Map(rows.found.map((row) => [String(row.id), row]));
    for (const [front, ids] of rows.ids)
      byFront.set(
        front,
        ids.map((id) => found.get(id)!),
      );
    return byFront;
  }

  /**
   * Up to `limit` events waiting behind the event numbered `afterSeq` of `key`, in order, locked, each
   * with whether it may start now (`ready`: due, or its lease, from a run that died, has run out).
   */
  followers(key: string, afterSeq: number, limit: number): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const c = f.ident;
    return b.statement(
      `SELECT ${c('id')}, ${c('attempts')}, CASE WHEN ${c('available_at')} <= ${f.now} THEN 1 ELSE 0 END AS ${c('ready')} ` +
        `FROM ${this.keyOrder.byKey('e')} WHERE ${c('key')} = ${b.bind(key)} AND ${c('status')} = 'waiting' ` +
        `AND ${c('seq')} > ${b.bind(afterSeq)} ORDER BY ${c('seq')} LIMIT ${b.bind(limit)}${f.forUpdate}`,
    );
  }

  /**
   * Leases waiting events to a claim's `token`, their attempt counted, as the claim leases its own: they
   * stay `waiting`, so a claim of another worker never takes them, and the next claim of their key's front
   * takes them back if this one dies.
   */
  private takeFollowers(ids: string[], token: string, leaseMs: number): Statement {
    const { f } = this;
    const b = new StatementBuilder(f.placeholder);
    const c = f.ident;
    return b.statement(
      `UPDATE ${f.byId(this.table)} SET ${c('claim_token')} = ${b.bind(token)}, ${c('available_at')} = ${f.later(b.bind, leaseMs)}, ` +
        `${c('attempts')} = ${c('attempts')} + 1, ${c('claimed_at')} = ${f.now} ` +
        `WHERE ${f.idIn(b.bind, ids)} AND ${c('status')} = 'waiting'`,
    );
  }

  /** The rows of `ids`, as a claim returns them. */
  private claimedRows(ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(`SELECT ${this.f.columns} FROM ${this.f.byId(this.table)} WHERE ${this.f.idIn(b.bind, ids)}`);
  }
}
