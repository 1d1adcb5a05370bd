import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { ClaimScope } from './delivery-ledger';
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
  private events: ClaimedEvent[] = [];
  private writing: Promise<void> = Promise.resolve();
  private readonly timer: NodeJS.Timeout;
  /** Successes whose acknowledgement was not written: refused, failed, or skipped after shutdown. */
  private readonly unwritten = new Set<string>();

  constructor(
    private readonly recorder: OutcomeRecorder,
    private readonly scope: ClaimScope,
  ) {
    this.timer = setInterval(() => void this.flush(), ACK_FLUSH_MS);
    // A pending acknowledgement never keeps the process alive on its own.
    this.timer.unref();
  }

  /** A success. Buffered successes are written by shutdown too; one that ends after it closed is not. */
  add(event: ClaimedEvent): void {
    if (this.recorder.mayAcknowledge(event.id)) this.events.push(event);
    else this.unwritten.add(event.id);
  }

  flush(): Promise<void> {
    const events = this.events;
    if (events.length > 0) {
      this.events = [];
      this.writing = this.writing.then(async () => {
        const written = await this.recorder.acknowledge(events, this.scope);
        if (written.length < events.length) {
          for (const e of events) if (!written.includes(e)) this.unwritten.add(e.id);
        }
      });
    }
    return this.writing;
  }

  /**
   * Writes what is buffered; true when the acknowledgement of `id` is written. A run (per-key order)
   * goes on only then: else its key's front has not moved, and another claim may hold the key.
   */
  async written(id: string): Promise<boolean> {
    await this.flush();
    return !this.unwritten.has(id);
  }

  /** The batch has ended: stops the timer and writes what is left. */
  close(): Promise<void> {
    clearInterval(this.timer);
    return this.flush();
  }
}
