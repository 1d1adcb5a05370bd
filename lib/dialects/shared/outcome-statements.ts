import type { FailureUpdate } from '../../interfaces/claimed-event.interface';
import type { RenewalArgs, SqlFlavor, Statement } from './outbox-dialect.interface';
import type { OutboxTable } from './outbox-table';
import { appendAttempt, LOGGED_ERROR_LENGTH } from './attempt-log';
import { StatementBuilder } from './statement-builder';

/**
 * The fenced writes of a delivery's outcome — acknowledge, fail, release, renew — written once for
 * every database; the differences come from its flavor.
 */

/**
 * The claim still holds the event: pending (or, in a run of per-key order, waiting behind an earlier
 * event of its key), with its token. Only another claim replaces the token, so a lease that ran out
 * while nobody claimed the event (the worker waited for a connection, or stalled) does not void the
 * outcome: the attempt ran once, and recording it is what keeps it from running again.
 */
function held(f: SqlFlavor, token: string): string {
  return `${f.ident('status')} IN ('pending', 'waiting') AND ${f.ident('claim_token')} = ${token}`;
}

/** Marks delivered, in one statement, those of `ids` that `token` still holds. */
export function acknowledgeStatement(f: SqlFlavor, table: OutboxTable, ids: string[], token: string): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('status')} = 'delivered', ${c('claim_token')} = NULL, ${c('processed_at')} = ${f.now} ` +
      `WHERE ${f.idIn(b.bind, ids)} AND ${held(f, b.bind(token))}`,
  );
}

/**
 * Records that `handler` is done with an event `token` still holds, adding it to the targets a retry
 * skips: a transactional handler's last write, in its own transaction (see `TransactionalTarget`).
 * Appended in SQL, so handlers of one event finishing at once each add their own.
 */
export function completeStatement(
  f: SqlFlavor,
  table: OutboxTable,
  id: string,
  token: string,
  handler: string,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const p = b.named({ id, token, handler });
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('completed_handlers')} = ${f.jsonAppend(c('completed_handlers'), p.handler)} ` +
      `WHERE ${c('id')} = ${p.id} AND ${held(f, p.token)}`,
  );
}

/** The attempts of those of `ids` that are delivered. */
export function deliveredStatement(f: SqlFlavor, table: OutboxTable, ids: string[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  return b.statement(
    `SELECT ${c('id')}, ${c('attempts')} FROM ${f.byId(table)} WHERE ${f.idIn(b.bind, ids)} AND ${c('status')} = 'delivered'`,
  );
}

/** Records a failed attempt: dead, or pending again after the retry delay; the attempt enters the history. */
export function failStatement(
  f: SqlFlavor,
  table: OutboxTable,
  id: string,
  token: string,
  u: FailureUpdate,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const p = b.named({ id, token, error: u.error, handlers: JSON.stringify(u.completedHandlers) });
  const dead = f.flag(b.bind, u.deadLetter);
  const failedAttempt = appendAttempt(f.attemptLog, c('attempt_log'), {
    attempt: c('attempts'),
    startedAt: f.timeText(c('claimed_at')),
    finishedAt: f.timeText(f.now),
    outcome: `CASE WHEN ${dead} THEN 'dead' ELSE 'failed' END`,
    error: f.left(p.error, LOGGED_ERROR_LENGTH),
    round: c('redrive_count'),
  });
  return b.statement(
    `UPDATE ${f.byId(table)} SET ` +
      `${c('available_at')} = CASE WHEN ${dead} THEN ${c('available_at')} ELSE ${f.later(b.bind, u.retryDelayMs)} END, ` +
      // An event of a run stays behind its key's front until that one's acknowledgement moves the front to it.
      `${c('status')} = CASE WHEN ${dead} THEN 'dead' WHEN ${c('status')} = 'waiting' THEN 'waiting' ELSE 'pending' END, ` +
      `${c('claim_token')} = NULL, ` +
      `${c('processed_at')} = CASE WHEN ${dead} THEN ${f.now} ELSE NULL END, ` +
      `${c('last_error')} = ${p.error}, ${c('completed_handlers')} = ${f.json(p.handlers)}, ` +
      `${c('attempt_log')} = ${failedAttempt} WHERE ${c('id')} = ${p.id} AND ${held(f, p.token)}`,
  );
}

/**
 * Gives claimed rows back, due now; `uncount` also takes back the attempt counted at claim (the handler
 * never ran). An attempt given back counted (its handler ran, shutdown stopped waiting) enters the history.
 */
export function releaseStatement(
  f: SqlFlavor,
  table: OutboxTable,
  ids: string[],
  token: string,
  uncount: boolean,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const taken = f.integer(b.bind(uncount ? 1 : 0));
  const released = appendAttempt(f.attemptLog, c('attempt_log'), {
    attempt: c('attempts'),
    startedAt: f.timeText(c('claimed_at')),
    finishedAt: f.timeText(f.now),
    outcome: "'released'",
    error: null,
    round: c('redrive_count'),
  });
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('claim_token')} = NULL, ${c('available_at')} = ${f.now}, ` +
      `${c('attempt_log')} = CASE WHEN ${taken} = 0 THEN ${released} ELSE ${c('attempt_log')} END, ` +
      `${c('attempts')} = ${c('attempts')} - ${taken} WHERE ${f.idIn(b.bind, ids)} AND ${held(f, b.bind(token))}`,
  );
}

/**
 * Gives a claimed event back, its attempt uncounted, due in `delayMs`, with `completedHandlers` (its
 * targets done so far): the share of its targets that were full waits for them; it keeps its status.
 */
export function deferStatement(
  f: SqlFlavor,
  table: OutboxTable,
  id: string,
  token: string,
  completedHandlers: string[],
  delayMs: number,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const c = f.ident;
  const p = b.named({ id, token, handlers: JSON.stringify(completedHandlers) });
  return b.statement(
    `UPDATE ${f.byId(table)} SET ${c('claim_token')} = NULL, ${c('available_at')} = ${f.later(b.bind, delayMs)}, ` +
      `${c('completed_handlers')} = ${f.json(p.handlers)}, ${c('attempts')} = ${c('attempts')} - 1 ` +
      `WHERE ${c('id')} = ${p.id} AND ${held(f, p.token)}`,
  );
}

/**
 * Extends to `leaseMs` from now the lease of those of `ids` that `token` still holds; `around` puts the
 * update into the statement the database returns its rows from.
 */
export function renewStatement(
  f: SqlFlavor,
  table: OutboxTable,
  a: RenewalArgs,
  around: (update: string) => string = (update) => update,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  return b.statement(
    around(
      `UPDATE ${f.byId(table)} SET ${f.ident('available_at')} = ${f.later(b.bind, a.leaseMs)} ` +
        `WHERE ${f.idIn(b.bind, a.ids)} AND ${held(f, b.bind(a.token))}`,
    ),
  );
}

/** Those of `ids` that `token` holds (what a renewal changed, where the update cannot say). */
export function heldAmong(f: SqlFlavor, table: OutboxTable, ids: string[], token: string): Statement {
  const b = new StatementBuilder(f.placeholder);
  return b.statement(
    `SELECT ${f.ident('id')} FROM ${f.byId(table)} WHERE ${f.idIn(b.bind, ids)} AND ${held(f, b.bind(token))}`,
  );
}
