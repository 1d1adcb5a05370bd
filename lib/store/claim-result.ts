import type { ClaimArgs } from '../dialects/shared/outbox-dialect.interface';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { decodeClaimed } from '../dialects/shared/dialect.util';

/** What the worker asks of a claim: the dialect's claim, and the lanes its runs may fill (per-key order). */
export type ClaimRequest = Omit<ClaimArgs, 'token'> & {
  /** The worker's lanes: runs only behind fewer fronts than this (any number when undefined). */
  lanes?: number;
};

export interface ClaimResult {
  token: string;
  /** Claimed events to deliver now. */
  events: ClaimedEvent[];
  /** Events whose final attempt's lease had expired: dead-lettered by the claim. */
  deadLettered: ClaimedEvent[];
  /**
   * Claimed rows that cannot be decoded (say, JSON cut short by MySQL's non-strict `sql_mode`), with
   * the reason. `deadLettered`: the claim already dead-lettered it, its attempts spent; else it is
   * leased to this claim like the events.
   */
  undecodable: Array<{ id: string; topic: string; attempts: number; error: string; deadLettered: boolean }>;
  /**
   * Per-key order's runs: by the id of a claimed event of an ordered key, the events of its key leased
   * with it, to be delivered after it, one after another, in order.
   */
  runs: Map<string, ClaimedEvent[]>;
  /** From the claim's first statement to its last (its runs' included), in ms. */
  durationMs: number;
}

/**
 * A claim's rows decoded: the events to deliver, by due time, and those the claim dead-lettered; a row
 * that cannot be decoded is set apart with the reason, never thrown (the claim has committed).
 */
export function decodedClaim(token: string, rows: Record<string, unknown>[], errorText: OutboxErrorText): ClaimResult {
  const claim: ClaimResult = { token, events: [], deadLettered: [], undecodable: [], runs: new Map(), durationMs: 0 };
  for (const row of rows) {
    let event: ClaimedEvent;
    try {
      event = decodeClaimed(row);
    } catch (error) {
      claim.undecodable.push({
        id: String(row.id),
        topic: String(row.topic),
        attempts: Number(row.attempts),
        error: errorText.describe(error),
        deadLettered: row.status === 'dead',
      });
      continue;
    }
    if (event.status === 'pending') claim.events.push(event);
    else if (event.status === 'dead') claim.deadLettered.push(event);
  }
  claim.events.sort(byDueTime);
  return claim;
}

function byDueTime(a: ClaimedEvent, b: ClaimedEvent): number {
  return a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}
