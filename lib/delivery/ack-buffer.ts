import type { ClaimedEvent } from '../dialects/shared/outbox-dialect.interface';
import type { ClaimScope } from './delivery-state';
import type { OutcomeRecorder } from './outcome-recorder';

/** Successes of a batch are acknowledged at least this often, not only when the batch ends. */
export const ACK_FLUSH_MS = 250;

/**
 * Collects the ids of a batch's successes for one acknowledgement statement, and writes them on a
 * timer of its own: a batch whose lanes sit idle behind one slow handler still acknowledges what
 * finished, so a crash then does not deliver it again.
 *
 * The recorder writes them (and never rejects). Writes run one after another, so a flush resolves
 * only when everything buffered before it is written.
 */
export class AckBuffer {
  private ids: string[] = [];
  private writing: Promise<void> = Promise.resolve();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly recorder: OutcomeRecorder,
    private readonly scope: ClaimScope,
    /** The events of the lanes these successes come from. */
    private readonly batch: ClaimedEvent[],
    /** Each event of a run (per-key order) to the one after it, which the lane starts only once it is written. */
    private readonly nextInRun: ReadonlyMap<string, string> = new Map(),
  ) {
    this.timer = setInterval(() => void this.flush(), ACK_FLUSH_MS);
    // A pending acknowledgement never keeps the process alive on its own.
    this.timer.unref();
  }

  /** A success. Buffered successes are written by shutdown too; one that ends after it closed is not. */
  add(id: string): void {
    if (this.recorder.mayAcknowledge(id)) this.ids.push(id);
  }

  flush(): Promise<void> {
    const ids = this.ids;
    if (ids.length > 0) {
      this.ids = [];
      // The key of an event whose successor in its run is still to start moves onto an event this claim holds.
      const heldNext = ids.filter((id) => this.nextInRun.has(id)).length;
      this.writing = this.writing.then(() => this.recorder.acknowledge(ids, this.scope, this.batch, heldNext));
    }
    return this.writing;
  }

  /** The batch has ended: stops the timer and writes what is left. */
  close(): Promise<void> {
    clearInterval(this.timer);
    return this.flush();
  }
}
