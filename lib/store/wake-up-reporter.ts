import type { WakeUpSide } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxEvents } from '../events/outbox-events';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';

/**
 * What the wake-up channel's connections report: a side's loss is emitted once (`wake-up.lost`) until
 * that side works again (`wake-up.restored`), and every error goes to the listener (the worker logs
 * them). Wake-up errors never affect publishing.
 */
export class WakeUpReporter {
  /** The sides whose loss was reported and not yet their return. */
  private readonly down = new Set<WakeUpSide>();
  private listener: ((error: unknown) => void) | undefined;

  constructor(
    private readonly events: OutboxEvents,
    private readonly errorText: OutboxErrorText,
  ) {}

  onError(listener: (error: unknown) => void): void {
    this.listener = listener;
  }

  failed(error: unknown, side: WakeUpSide): void {
    if (!this.down.has(side)) {
      this.down.add(side);
      if (this.events.observed) this.events.emit({ type: 'wake-up.lost', side, error: this.errorText.describe(error) });
    }
    this.listener?.(error);
  }

  working(side: WakeUpSide): void {
    if (this.down.delete(side) && this.events.observed) this.events.emit({ type: 'wake-up.restored', side });
  }
}
