import type { Logger } from '@nestjs/common';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { ResolvedRetention } from '../interfaces/outbox-options.interface';
import type { OutboxStore } from '../store/outbox.store';

/** What one retention pass deleted. */
export interface OutboxPurgeResult {
  /** Delivered rows older than `retention.deliveredMs`. */
  delivered: number;
  /** Dead letters older than `retention.deadMs` (always 0 when it is not set). */
  dead: number;
}

/**
 * Deletes finished rows once they are old enough, batch after batch until one comes back short; each
 * batch is one short statement or transaction of its own, so no lock outlives it. Passes of one worker
 * run one at a time; those of other instances skip the rows a pass has locked (see the dialects).
 */
export class Retention {
  private current: Promise<unknown> = Promise.resolve();
  private running = false;
  private stopping = false;
  private readonly logger: Logger;

  constructor(
    private readonly policy: ResolvedRetention,
    private readonly store: OutboxStore,
    private readonly errorText: OutboxErrorText,
  ) {
    this.logger = errorText.logger('OutboxRetention');
  }

  get intervalMs(): number {
    return this.policy.intervalMs;
  }

  /** One pass, after the one in progress if any. */
  pass(): Promise<OutboxPurgeResult> {
    const next = this.current.then(() => this.run());
    this.current = next.catch(() => undefined);
    return next;
  }

  /** The scheduled pass: skipped while a pass still runs (the next interval comes soon enough). */
  tick(): void {
    if (this.running || this.stopping) return;
    this.pass().catch((error) =>
      this.logger.error(`Outbox retention failed; will retry at the next interval: ${this.errorText.describe(error)}`),
    );
  }

  /** No batch starts from now on; resolves when the one in progress has ended. */
  stop(): Promise<void> {
    this.stopping = true;
    return this.current.then(() => undefined);
  }

  private async run(): Promise<OutboxPurgeResult> {
    const result: OutboxPurgeResult = { delivered: 0, dead: 0 };
    this.running = true;
    try {
      await this.purgeAll('delivered', this.policy.deliveredMs, (n) => (result.delivered += n));
      if (this.policy.deadMs !== undefined) await this.purgeAll('dead', this.policy.deadMs, (n) => (result.dead += n));
      await this.purgeIdleKeys();
    } finally {
      this.running = false;
      // Also when a batch failed: what was deleted before it is gone.
      if (result.delivered + result.dead > 0) {
        this.logger.log(
          `Retention deleted ${result.delivered} delivered and ${result.dead} dead event(s) from ${this.store.table.path}`,
        );
      }
    }
    return result;
  }

  /** Rows of ordered keys with nothing unfinished (the next publish of such a key writes its row again). */
  private async purgeIdleKeys(): Promise<void> {
    const { batchSize } = this.policy;
    let deleted = 0;
    for (let n = batchSize; n === batchSize && !this.stopping; deleted += n) {
      n = await this.store.purgeIdleKeys(batchSize);
    }
    if (deleted > 0)
      this.logger.log(`Retention deleted the rows of ${deleted} idle ordered key(s) of ${this.store.table.path}`);
  }

  private async purgeAll(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    count: (deleted: number) => void,
  ): Promise<void> {
    const { batchSize } = this.policy;
    while (!this.stopping) {
      const deleted = await this.store.purge({ status, olderThanMs, batchSize });
      count(deleted);
      if (deleted < batchSize) return;
    }
  }
}
