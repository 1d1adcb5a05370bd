import type { Bind, SqlFlavor, Statement } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import type { OutboxEventState } from '../interfaces/outbox-operations.interface';
import type { EventQuery } from './operations-input';

/** LIKE's escape character, the same on every database (a backslash is not: MySQL reads it in literals). */
const ESCAPE = '!';
const escapeLike = (text: string) => text.replace(/[!%_]/g, (c) => `${ESCAPE}${c}`);

/** Builds one statement: parameters bound in order, placeholders in the database's form. */
export class StatementBuilder {
  readonly params: unknown[] = [];

  constructor(readonly f: SqlFlavor) {}

  readonly bind: Bind = (value) => {
    this.params.push(value);
    return this.f.placeholder(this.params.length);
  };

  statement(sql: string): Statement {
    return { sql, params: this.params };
  }
}

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
      default:
        return `${this.c('status')} = '${state === 'delivered' ? 'delivered' : 'dead'}'`;
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
      const literal = segments.slice(0, segments.findIndex((s) => s === '*' || s === '#')).join('.');
      if (literal) where.push(`${this.c('topic')} LIKE ${b.bind(`${escapeLike(literal)}%`)} ESCAPE '${ESCAPE}'`);
    }
    if (q.key !== undefined) where.push(`${this.c('key')} = ${b.bind(q.key)}`);
    if (q.dedupeKey !== undefined) where.push(`${this.c('dedupe_key')} = ${b.bind(q.dedupeKey)}`);
    if (q.ids) where.push(this.idIn(b, q.ids));
    if (q.errorContains !== undefined) {
      const like = `%${escapeLike(q.errorContains.toLowerCase())}%`;
      where.push(
        `(LOWER(COALESCE(${this.c('last_error')}, '')) LIKE ${b.bind(like)} ESCAPE '${ESCAPE}' ` +
          `OR LOWER(COALESCE(${this.c('note')}, '')) LIKE ${b.bind(like)} ESCAPE '${ESCAPE}')`,
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
    const b = new StatementBuilder(this.f);
    const where = this.conditions(b, q);
    if (args.after) where.push(`${this.c('id')} ${args.newestFirst ? '<' : '>'} ${b.bind(args.after)}`);
    const columns = args.columns ?? `${this.f.columns}, ${this.state()} AS ${this.c('op_state')}`;
    return b.statement(
      `SELECT ${columns} FROM ${this.t}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ` +
        `ORDER BY ${this.c('id')} ${args.newestFirst ? 'DESC' : 'ASC'} LIMIT ${b.bind(args.limit)}`,
    );
  }

  /** The id and state of each listed event; with `lock`, locked until the transaction ends (where the database locks rows). */
  lockStates(ids: string[], lock: boolean): Statement {
    const b = new StatementBuilder(this.f);
    return b.statement(
      `SELECT ${this.c('id')}, ${this.state()} AS ${this.c('op_state')} FROM ${this.t} WHERE ${this.idIn(b, ids)}` +
        (lock ? this.f.forUpdate : ''),
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
    return ['id', 'topic', 'last_error', 'note'].map((c) => this.c(c)).join(', ') + `, ${time} AS ${this.c('processed_at')}`;
  }

  /** Dead letters back to pending, due now, if they are still dead. */
  redrive(ids: string[], reset: boolean, maxAttempts: number): Statement {
    const b = new StatementBuilder(this.f);
    const c = (name: string) => this.c(name);
    const attempts = reset
      ? '0'
      : `CASE WHEN ${c('attempts')} >= ${b.bind(maxAttempts)} THEN ${b.bind(maxAttempts - 1)} ELSE ${c('attempts')} END`;
    // The new round starts clean of the last one's expiry (the claim would read it as a crash suspect);
    // last_error stays until an attempt of the new round records its own.
    return b.statement(
      `UPDATE ${this.t} SET ${c('attempts')} = ${attempts}, ${c('status')} = 'pending', ${c('claim_token')} = NULL, ` +
        `${c('available_at')} = ${this.f.now}, ${c('processed_at')} = NULL, ${c('last_expired_attempt')} = NULL, ` +
        `${c('note')} = NULL, ${c('redrive_count')} = ${c('redrive_count')} + 1 ` +
        `WHERE ${this.idIn(b, ids)} AND ${c('status')} = 'dead'`,
    );
  }

  discard(ids: string[]): Statement {
    const b = new StatementBuilder(this.f);
    return b.statement(`DELETE FROM ${this.t} WHERE ${this.idIn(b, ids)} AND ${this.c('status')} = 'dead'`);
  }

  /** Scheduled events (delayed or backing off) due now, if nobody claimed them meanwhile. */
  deliverNow(ids: string[]): Statement {
    const b = new StatementBuilder(this.f);
    return b.statement(
      `UPDATE ${this.t} SET ${this.c('available_at')} = ${this.f.now} ` +
        `WHERE ${this.idIn(b, ids)} AND ${this.stateCondition('scheduled')}`,
    );
  }

  /** Events counted by topic and state. */
  countsByTopic(): Statement {
    return {
      sql:
        `SELECT ${this.c('topic')}, ${this.state()} AS ${this.c('op_state')}, COUNT(*) AS ${this.c('n')} ` +
        `FROM ${this.t} GROUP BY ${this.c('topic')}, ${this.c('op_state')}`,
      params: [],
    };
  }

  /** The clock, the oldest due event's wait, the last claim and recent deliveries, in one row. */
  health(): Statement {
    const b = new StatementBuilder(this.f);
    const { now, msSince, timeText, ago } = this.f;
    const c = (name: string) => this.c(name);
    const delivered = (ms: number) =>
      `(SELECT COUNT(*) FROM ${this.t} WHERE ${c('status')} = 'delivered' AND ${c('processed_at')} >= ${ago(b.bind, ms)})`;
    return b.statement(
      `SELECT ${timeText(now)} AS ${c('at')}, ` +
        `(SELECT ${msSince(`MIN(${c('available_at')})`)} FROM ${this.t} WHERE ${this.stateCondition('due')}) AS ${c('oldest_due_ms')}, ` +
        `(SELECT ${timeText(`MAX(${c('claimed_at')})`)} FROM ${this.t}) AS ${c('last_claim_at')}, ` +
        `${delivered(60_000)} AS ${c('minute')}, ${delivered(3_600_000)} AS ${c('hour')}`,
    );
  }
}
