import { performance } from 'node:perf_hooks';
import type { OutboxStore } from '../store/outbox.store';
import { OutboxLeaseLostError } from '../errors/outbox.errors';
import type { ClaimScope, DeliveryLedger } from './delivery-ledger';
import type { OutcomeRecorder } from './outcome-recorder';

/** How often a claim's lease is renewed: a third of it, so two renewals may fail before it expires. */
export function renewalIntervalMs(leaseMs: number): number {
  return Math.floor(leaseMs / 3);
}

/**
 * Keeps the lease of one claim alive while its events wait for a lane or run (`worker.renewLease`):
 * every third of the lease, one statement extends, fenced by the claim token, the
 * lease of every event of the claim that is not finished yet. Events that finished are left alone:
 * their outcome is being written, and the fence of that write decides.
 *
 * An event the renewal no longer holds lost its lease (it expired while the worker or the database
 * stalled, and another claim took it): its handlers' signals are aborted, its lane stops
 * waiting for them, and its outcome is never written. A renewal the database fails is logged and tried
 * again at the next turn; the lease keeps the expiry it had, and the fence of every write keeps the
 * outcome right if it runs out meanwhile. A worker that dies renews nothing: its events are claimed by
 * another once their lease runs out.
 */
export class LeaseRenewal {
  private readonly timer: NodeJS.Timeout;
  readonly intervalMs: number;
  /** The renewal statement on its way, if any: turns never overlap, and stop() waits for it. */
  private running: Promise<void> | undefined;
  /** `performance.now()` until which the lease of the events still held is sure to last. */
  private liveUntil: number;
  private readonly lost = new Set<string>();
  private stopped = false;
  /** Takes it off the ledger's renewals. */
  private readonly untrack: () => void;

  constructor(
    private readonly scope: ClaimScope,
    claimedAt: number,
    private readonly leaseMs: number,
    private readonly ctx: { store: OutboxStore; ledger: DeliveryLedger; recorder: OutcomeRecorder },
  ) {
    this.liveUntil = claimedAt + leaseMs;
    this.intervalMs = renewalIntervalMs(leaseMs);
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    // A renewal never keeps the process alive on its own.
    this.timer.unref();
    this.untrack = ctx.ledger.trackRenewal(this);
  }

  /** How long the lease is sure to last from now, in ms (negative: it may have run out). */
  leaseLeftMs(): number {
    return this.liveUntil - performance.now();
  }

  /** Whether a renewal found that this claim lost the event's lease. */
  isLost(id: string): boolean {
    return this.lost.has(id);
  }

  /** Renews no more; resolves once the renewal on its way, if any, has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
    this.untrack();
  }

  private tick(): void {
    // The last renewal is still on its way (a slow database): it stands for this turn too.
    if (this.running) return;
    // Shut down: nothing runs SQL any more, and shutdown itself gives the events back.
    if (this.stopped || this.ctx.ledger.closed) {
      void this.stop();
      return;
    }
    const ids = this.ctx.ledger.unfinished(this.scope.token);
    if (ids.length === 0) return;
    this.running = this.renew(ids).finally(() => (this.running = undefined));
  }

  private async renew(ids: string[]): Promise<void> {
    const { store } = this.ctx;
    const sentAt = performance.now();
    let renewed: Set<string>;
    try {
      renewed = new Set(await store.renew(ids, this.scope.token, this.leaseMs));
    } catch (error) {
      this.ctx.recorder.reports.renewalFailed(ids.length, this.intervalMs, error);
      return;
    }
    // Shutdown has released what it holds since: a refusal now says nothing about the lease.
    if (this.ctx.ledger.closed) return;
    // The database counted the new lease from a moment after this one.
    this.liveUntil = sentAt + this.leaseMs;
    // One that finished meanwhile has its outcome written (or refused) by its own fenced write.
    const lost = ids.filter((id) => !renewed.has(id) && this.ctx.ledger.holds(id, this.scope.token));
    if (lost.length > 0) this.giveUp(lost);
  }

  /** The lease of `ids` is lost: none is started, running handlers are aborted, no outcome is written. */
  private giveUp(ids: string[]): void {
    for (const id of ids) this.lost.add(id);
    // Those not started yet are skipped by their lanes; the running ones' handlers are aborted.
    this.ctx.ledger.lost(ids, this.scope, (id) => new OutboxLeaseLostError(id));
    this.ctx.recorder.reports.renewalLost(ids, this.scope.total);
  }
}
