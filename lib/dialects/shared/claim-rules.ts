import type { SqlFlavor } from './outbox-dialect.interface';
import { appendAttempt } from './attempt-log';
import { noAttemptLeft } from '../../interfaces/claimed-event.interface';

/**
 * Written to `note` by the claim that finds an attempt's lease expired ("attempt 2 of 5 …"): the worker
 * stopped, crashed or stalled mid-attempt. The worker reads it back (see `previousAttemptExpired`).
 */
export const LEASE_EXPIRED = 'did not finish before its lease expired (the worker stopped, crashed or was too slow)';

/**
 * Written by the claim that dead-letters an event whose last attempt was given back unfinished (a
 * release at shutdown) and left no error of its own. Any recorded error is kept instead.
 */
export const NO_OUTCOME = 'ended without a recorded outcome, and no attempt is left';

/** Where the claim's values are, in the statement being built. */
export interface ClaimPlaces {
  /** The database clock, read once for the statement. */
  now: string;
  /** The end of the new lease. */
  leaseEnd: string;
  token: string;
  maxAttempts: string;
}

/**
 * The claim's assignments, the same on every database, as one `SET` list: a row with an attempt left
 * gets the token, the lease and its attempt counted; a row without one is dead-lettered instead (noted
 * as ended without an outcome when it has no error of its own); a row still holding a token had its
 * lease expire, which enters the history and the note. Written in the order MySQL needs: it evaluates
 * assignments left to right, each seeing the ones before, so the history and the note (which read the
 * old token) go first and `attempts` last, and every assignment reads the row as it was before the claim.
 * `afterClaim` is the same rule applied to a row the claim's locking read returned.
 */
export function claimAssignments(f: SqlFlavor, p: ClaimPlaces): string {
  const c = f.ident;
  const spent = `${c('attempts')} >= ${f.integer(p.maxAttempts)}`;
  const held = `${c('claim_token')} IS NOT NULL`;
  const note = (text: string) =>
    f.concat("'attempt '", c('attempts'), "' of '", f.integer(p.maxAttempts), `' ${text}'`);
  // The attempt whose lease expired enters the history, ended when its lease did.
  const expiredAttempt = appendAttempt(f.attemptLog, c('attempt_log'), {
    attempt: c('attempts'),
    startedAt: f.timeText(c('claimed_at')),
    finishedAt: f.timeText(c('available_at')),
    outcome: "'expired'",
    error: null,
    round: c('redrive_count'),
  });
  const unless = (column: string, value: string) =>
    `${c(column)} = CASE WHEN ${spent} THEN ${c(column)} ELSE ${value} END`;
  return [
    `${c('attempt_log')} = CASE WHEN ${held} THEN ${expiredAttempt} ELSE ${c('attempt_log')} END`,
    unless('claimed_at', p.now),
    `${c('note')} = CASE WHEN ${held} THEN ${note(LEASE_EXPIRED)} ` +
      `WHEN ${spent} AND ${c('last_error')} IS NULL THEN ${note(NO_OUTCOME)} ELSE ${c('note')} END`,
    `${c('expired_attempts')} = ${c('expired_attempts')} + CASE WHEN ${held} THEN 1 ELSE 0 END`,
    `${c('last_expired_attempt')} = CASE WHEN ${held} THEN ${c('attempts')} ELSE ${c('last_expired_attempt')} END`,
    `${c('claim_token')} = CASE WHEN ${spent} THEN NULL ELSE ${p.token} END`,
    unless('available_at', p.leaseEnd),
    `${c('status')} = CASE WHEN ${spent} THEN 'dead' ELSE 'pending' END`,
    `${c('processed_at')} = CASE WHEN ${spent} THEN ${p.now} ELSE NULL END`,
    unless('attempts', `${c('attempts')} + 1`),
  ].join(',\n    ');
}

/**
 * A claimed row as the claim's assignments leave it, from the row as the locking read found it (with
 * its old `claim_token`), for a database whose update cannot return rows.
 */
export function afterClaim(row: Record<string, unknown>, maxAttempts: number): Record<string, unknown> {
  const attempts = Number(row.attempts);
  const spent = noAttemptLeft(attempts, maxAttempts);
  const expired = row.claim_token != null;
  let note = row.note;
  if (expired) note = `attempt ${attempts} of ${maxAttempts} ${LEASE_EXPIRED}`;
  else if (spent && row.last_error == null) note = `attempt ${attempts} of ${maxAttempts} ${NO_OUTCOME}`;
  return {
    ...row,
    status: spent ? 'dead' : 'pending',
    attempts: spent ? attempts : attempts + 1,
    note,
    last_expired_attempt: expired ? attempts : row.last_expired_attempt,
  };
}
