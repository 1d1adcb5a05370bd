import type { SqlFlavor, Statement } from '../dialects/shared/outbox-dialect.interface';
import { StatementBuilder } from '../dialects/shared/statement-builder';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import type { OutboxEventState } from '../interfaces/outbox-operations.interface';
import type { EventQuery } from './operations-input';

/** LIKE's escape character, the same on every database (a backslash is not: MySQL reads it in literals). */
const ESCAPE = '!';
const escapeLike = (text: string) => text.replace(/[!%_]/g, (c) => `${ESCAPE}${c}`);

/**
 * SQL for the operations service, one builder for every database: the differences (quoting,
 * placeholders, time arithmetic) come from the dialect's flavor.
 */
export class OperationsStatements {
  private readonly t: string;

  constructor(
    private readonly f: SqlFlavor,
    table: OutboxTable,
  ) {
    this.t = f.table(table);
  }

  private c(name: string): string {
    return this.f.ident(name);
  }

  /** Where an event stands by the database clock (as `counts()` sees it). */
  state(): string {
    const { now } = this.f;
    return (
      `CASE WHEN ${this.c('status')} <> 'pending' THEN ${this.c('status')} ` +
      `WHEN ${this.c('available_at')} <= ${now} THEN 'due' ` +
      `WHEN ${this.c('claim_token')} IS NOT NULL THEN 'in_flight' ELSE 'scheduled' END`
    );
  }

  private stateCondition(state: OutboxEventState): string {
    const { now } = this.f;
    const pending = `${this.c('status')} = 'pending'`;
    switch (state) {
      case 'due':
        return `(${pending} AND ${this.c('available_at')} <= ${now})`;
      case 'scheduled':
        return `(${pending} AND ${this.c('available_at')} > ${now} AND ${this.c('claim_token')} IS NULL)`;
      case 'in_flight':
        return `(${pending} AND ${this.c('available_at')} > ${now} AND ${this.c('claim_token')} IS NOT NULL)`;
      case 'waiting':
      case 'delivered':
      case 'dead':
        return `${this.c('status')} = '${state}'`;
    }
  }

  /** The conditions of a filter, ANDed; a topic pattern is narrowed by LIKE here and matched exactly by the caller. */
  conditions(b: StatementBuilder, q: EventQuery): string[] {
    const where: string[] = [];
    const { time } = this.f;
    if (q.states) where.push(`(${q.states.map((s) => this.stateCondition(s)).join(' OR ')})`);
    if (q.topic && 'exact' in q.topic) where.push(`${this.c('topic')} = ${b.bind(q.topic.exact)}`);
    if (q.topic && 'pattern' in q.topic) {
      // The literal segments before the first wildcard, as a prefix (`#` may match no segment at all).
      const segments = q.topic.pattern.split('.');
      const literal = segments
        .slice(
          0,
          segments.findIndex((s) => s === '*' || s === '#'),
        )
        .join('.');
      if (literal) where.push(`${this.c('topic')} LIKE ${b.bind(`${escapeLike(literal)}%`)} ESCAPE '${ESCAPE}'`);
    }
    if (q.key !== undefined) where.push(`${this.c('key')} = ${b.bind(q.key)}`);
    if (q.dedupeKey !== undefined) where.push(`${this.c('dedupe_key')} = ${b.bind(q.dedupeKey)}`);
    if (q.ids) where.push(this.idIn(b, q.ids));
    if (q.errorContains !== undefined) {
      // Both sides folded by the database's LOWER: SQLite's folds only A to Z, so a needle folded here
      // ('ärger') would miss the very text it was copied from ('Ärger').
      const like = `%${escapeLike(q.errorContains)}%`;
      where.push(
        `(LOWER(COALESCE(${this.c('last_error')}, '')) LIKE LOWER(${b.bind(like)}) ESCAPE '${ESCAPE}' ` +
          `OR LOWER(COALESCE(${this.c('note')}, '')) LIKE LOWER(${b.bind(like)}) ESCAPE '${ESCAPE}')`,
      );
    }
    if (q.createdAfter) where.push(`${this.c('created_at')} >= ${time(b.bind, q.createdAfter)}`);
    if (q.createdBefore) where.push(`${this.c('created_at')} < ${time(b.bind, q.createdBefore)}`);
    if (q.processedAfter) where.push(`${this.c('processed_at')} >= ${time(b.bind, q.processedAfter)}`);
    if (q.processedBefore) where.push(`${this.c('processed_at')} < ${time(b.bind, q.processedBefore)}`);
    return where;
  }

  idIn(b: StatementBuilder, ids: string[]): string {
    return `${this.c('id')} IN (${ids.map((id) => b.bind(id)).join(', ')})`;
  }

  /** Whole events with their state, in id order, after the keyset position `after`. */
  page(q: EventQuery, args: { limit: number; newestFirst: boolean; after?: string; columns?: string }): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const where = this.conditions(b, q);
    if (args.after) where.push(`${this.c('id')} ${args.newestFirst ? '<' : '>'} ${b.bind(args.after)}`);
    const columns = args.columns ?? `${this.f.columns}, ${this.state()} AS ${this.c('op_state')}`;
    return b.statement(
      `SELECT ${columns} FROM ${this.t}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ` +
        `ORDER BY ${this.c('id')} ${args.newestFirst ? 'DESC' : 'ASC'} LIMIT ${b.bind(args.limit)}`,
    );
  }

  /**
   * Locks the listed events until the transaction ends, in id order: two transactions locking the same
   * events queue instead of deadlocking, and MariaDB reads them through the primary key (unordered, it may
   * scan another index of a small table, and wait for rows outside the list). Undefined where the
   * database has one writer and no row locks.
   */
  lock(ids: string[]): Statement | undefined {
    if (!this.f.forUpdate) return undefined;
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `SELECT ${this.c('id')} FROM ${this.t} WHERE ${this.idIn(b, ids)} ORDER BY ${this.c('id')}${this.f.forUpdate}`,
    );
  }

  /**
   * The id and state of each listed event. Read after `lock`, in a statement of its own: a locking read
   * sees the rows as they are once its wait ends, but by the clock at its start, before the wait, when an
   * event another transaction made due meanwhile was still scheduled.
   */
  states(ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `SELECT ${this.c('id')}, ${this.c('key')}, ${this.c('seq')}, ${this.state()} AS ${this.c('op_state')} ` +
        `FROM ${this.t} WHERE ${this.idIn(b, ids)}`,
    );
  }

  idColumn(): string {
    return this.c('id');
  }

  topicColumn(): string {
    return this.c('topic');
  }

  /** What `failureGroups()` reads of a dead letter. */
  failureColumns(): string {
    const time = this.f.timeText(this.c('processed_at'));
    return (
      ['id', 'topic', 'last_error', 'note'].map((c) => this.c(c)).join(', ') + `, ${time} AS ${this.c('processed_at')}`
    );
  }

  /**
   * Dead letters back to pending, due now, if they are still dead; those of ordered keys to waiting, for
   * `OrderedKeys.requeue` to place in their key (only a key's front may be pending, schema version 9).
   */
  redrive(ids: string[], reset: boolean, maxAttempts: number): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    const attempts = reset
      ? '0'
      : `CASE WHEN ${c('attempts')} >= ${b.bind(maxAttempts)} THEN ${b.bind(maxAttempts - 1)} ELSE ${c('attempts')} END`;
    // The new round starts clean of the last one's expiry (the claim would read it as a crash suspect);
    // last_error stays until an attempt of the new round records its own.
    return b.statement(
      `UPDATE ${this.t} SET ${c('attempts')} = ${attempts}, ` +
        `${c('status')} = CASE WHEN ${c('seq')} IS NULL THEN 'pending' ELSE 'waiting' END, ${c('claim_token')} = NULL, ` +
        `${c('available_at')} = ${this.f.now}, ${c('processed_at')} = NULL, ${c('last_expired_attempt')} = NULL, ` +
        `${c('note')} = NULL, ${c('redrive_count')} = ${c('redrive_count')} + 1 ` +
        `WHERE ${this.idIn(b, ids)} AND ${c('status')} = 'dead'`,
    );
  }

  discard(ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(`DELETE FROM ${this.t} WHERE ${this.idIn(b, ids)} AND ${this.c('status')} = 'dead'`);
  }

  /**
   * Scheduled events (delayed or backing off) due now, if still pending and unclaimed. Not their time
   * again: they were read as scheduled under their locks, and the clock that moved since can only have
   * made one due, which this makes it anyway; checking it again would leave unchanged an event counted.
   */
  deliverNow(ids: string[]): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    return b.statement(
      `UPDATE ${this.t} SET ${this.c('available_at')} = ${this.f.now} ` +
        `WHERE ${this.idIn(b, ids)} AND ${this.c('status')} = 'pending' AND ${this.c('claim_token')} IS NULL`,
    );
  }

  /**
   * Unfinished events by topic and state, dead letters and events waiting behind their key by topic: the
   * small sets, each through its partial index.
   */
  openCountsByTopic(): Statement {
    const c = (name: string) => this.c(name);
    return {
      sql:
        `SELECT ${c('topic')}, ${this.state()} AS ${c('op_state')}, COUNT(*) AS ${c('n')} FROM ${this.t} ` +
        `WHERE ${c('status')} = 'pending' GROUP BY ${c('topic')}, ${c('op_state')} ` +
        `UNION ALL SELECT ${c('topic')}, 'dead', COUNT(*) FROM ${this.t} WHERE ${c('status')} = 'dead' GROUP BY ${c('topic')} ` +
        // Behind an earlier event of their key: not due before it is finished, as counts() has them.
        `UNION ALL SELECT ${c('topic')}, 'scheduled', COUNT(*) FROM ${this.t} WHERE ${c('status')} = 'waiting' ` +
        `GROUP BY ${c('topic')}`,
      params: [],
    };
  }

  /** Delivered events by topic: a count of every delivered row, as long as the table is. */
  deliveredByTopic(): Statement {
    return {
      sql:
        `SELECT ${this.c('topic')}, COUNT(*) AS ${this.c('n')} FROM ${this.t}${this.f.inTableOrder ?? ''} ` +
        `WHERE ${this.c('status')} = 'delivered' GROUP BY ${this.c('topic')}`,
      params: [],
    };
  }

  /** Deliveries of the last hour and minute, from the retention index alone (no row is read). */
  recentDeliveries(): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    const minute = this.f.ago(b.bind, 60_000);
    const hour = this.f.ago(b.bind, 3_600_000);
    return b.statement(
      `SELECT COUNT(*) AS ${c('hour')}, SUM(CASE WHEN ${c('processed_at')} >= ${minute} THEN 1 ELSE 0 END) AS ${c('minute')} ` +
        `FROM ${this.t} WHERE ${c('status')} = 'delivered' AND ${c('processed_at')} >= ${hour}`,
    );
  }

  /**
   * The clock, the oldest due event's wait, and where to look for the last claim: the latest claim of
   * an unfinished event and of the last event finished. Each through an index, never a scan.
   */
  clock(): Statement {
    const { now, msSince, timeText } = this.f;
    const c = (name: string) => this.c(name);
    const lastFinished = (status: string) =>
      `(SELECT ${c('claimed_at')} FROM ${this.t} WHERE ${c('status')} = '${status}' ORDER BY ${c('processed_at')} DESC LIMIT 1)`;
    return {
      sql:
        `SELECT ${timeText(now)} AS ${c('at')}, ` +
        `(SELECT ${msSince(`MIN(${c('available_at')})`)} FROM ${this.t} WHERE ${this.stateCondition('due')}) AS ${c('oldest_due_ms')}, ` +
        `(SELECT ${timeText(`MAX(${c('claimed_at')})`)} FROM ${this.t} WHERE ${c('status')} = 'pending') AS ${c('open_claim')}, ` +
        `${timeText(lastFinished('delivered'))} AS ${c('delivered_claim')}, ${timeText(lastFinished('dead'))} AS ${c('dead_claim')}`,
      params: [],
    };
  }

  /**
   * The latest claim among events finished since `since`: an event claimed after `since` and finished
   * since is finished after it too, so this range (through the retention index) holds the last claim.
   */
  lastClaimSince(since: Date): Statement {
    const b = new StatementBuilder(this.f.placeholder);
    const c = (name: string) => this.c(name);
    return b.statement(
      `SELECT ${this.f.timeText(`MAX(${c('claimed_at')})`)} AS ${c('last_claim_at')} FROM ${this.t} ` +
        `WHERE (${c('status')} = 'delivered' OR ${c('status')} = 'dead') AND ${c('processed_at')} >= ${this.f.time(b.bind, since)}`,
    );
  }
}
