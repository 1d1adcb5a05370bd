import { Logger } from '@nestjs/common';
import type { ClaimedEvent } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxStore } from '../store/outbox.store';
import { describeError } from '../utils/describe-error';
import type { DeliveryState } from './delivery-state';
import type { OutboxDrainResult } from './drain-result';
import type { OutboxReleaseReason } from '../events/lifecycle-event';
import type { OutboxEvents } from '../events/outbox-events';

/** How a fenced write ended: applied, rejected (another claim took the event), or not made (database error, shut down). */
export type Recorded = 'done' | 'rejected' | 'not-made';

/**
 * The worker's writes of a claim's outcome, each fenced by the claim token: what they did is logged
 * and emitted here, and a write the database refuses or fails is never thrown (the lease decides then).
 */
export class FencedWrites {
  private readonly logger = new Logger('OutboxWorker');

  constructor(
    private readonly store: OutboxStore,
    private readonly events: OutboxEvents,
    private readonly state: DeliveryState,
  ) {}

  /** Runs a fenced state change of one event, logging what did not happen. */
  async record(what: string, id: string, change: () => Promise<boolean>): Promise<Recorded> {
    if (this.state.closed) {
      this.logger.warn(`Outbox ${what} of event ${id} skipped: the worker has shut down; its lease will expire`);
      return 'not-made';
    }
    try {
      if (await change()) return 'done';
      if (this.events.observed) {
        this.events.emit({ type: 'lease.lost', ids: [id], count: 1, what: what === 'release' ? 'release' : 'fail' });
      }
      this.logger.warn(
        `Outbox ${what} of event ${id} rejected: its lease expired and another claim took it`,
      );
      return 'rejected';
    } catch (error) {
      this.logStoreError(what, id, error);
      return 'not-made';
    }
  }

  /** Gives claimed events back uncounted, in one statement. */
  async releaseUnstarted(
    ids: string[],
    token: string,
    total: OutboxDrainResult,
    why: OutboxReleaseReason = 'isolation',
  ): Promise<number> {
    for (const id of ids) this.state.waiting.delete(id);
    try {
      const released = await this.store.releaseMany(ids, token, true);
      total.released += released;
      total.lostLeases += ids.length - released;
      this.emitWritten(ids, released, 'release', { uncounted: true, why });
      return released;
    } catch (error) {
      this.logStoreError('release', ids.join(', '), error);
      return 0;
    }
  }

  /** Gives back, its attempt counted, an event whose handler shutdown stopped waiting for. */
  async releaseRunning(id: string, token: string): Promise<void> {
    const released = await this.store.release(id, token, false).catch((error) => this.logStoreError('release', id, error));
    if (released === undefined) return;
    this.emitWritten([id], released ? 1 : 0, 'release', { uncounted: false, why: 'shutdown' });
  }

  /**
   * What a fenced write of several events did: `applied` of `ids` were written, the rest refused for a
   * lost lease. The database does not say which; a batch shares one token, so it is all or none.
   */
  emitWritten(
    ids: string[],
    applied: number,
    what: 'acknowledge' | 'release',
    detail: ClaimedEvent[] | { uncounted: boolean; why: OutboxReleaseReason },
  ): void {
    if (!this.events.observed) return;
    if (applied < ids.length) this.events.emit({ type: 'lease.lost', ids, count: ids.length - applied, what });
    if (applied !== ids.length) return;
    if (Array.isArray(detail)) {
      const byId = new Map(detail.map((e) => [e.id, e]));
      for (const id of ids) {
        const event = byId.get(id)!;
        this.events.emit({ type: 'delivered', id, topic: event.topic, attempt: event.attempts });
      }
    } else {
      this.events.emit({ type: 'released', ids, ...detail });
    }
  }

  logStoreError(what: string, id: string, error: unknown): void {
    this.logger.error(`Outbox ${what} of event ${id} failed; its lease will expire: ${describeError(error)}`);
  }
}
