import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { describeErrorChain } from '../utils/describe-error';
import { redactSecrets } from '../utils/redact';
import { OUTBOX_INBOX_OPTIONS } from './inbox-constants';
import type { ResolvedInboxOptions } from './inbox-options';
import { OutboxInboxService } from './outbox-inbox.service';

/** Rows one retention statement deletes at most: short statements, short locks. */
export const INBOX_RETENTION_BATCH = 1_000;

/**
 * Forgets received ids older than `retentionMs`, every `retentionIntervalMs`, in batches until none is
 * left. A failed sweep is logged and tried again at the next interval; it never stops the application.
 */
@Injectable()
export class InboxRetention implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('OutboxInbox');
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    @Inject(OUTBOX_INBOX_OPTIONS) private readonly options: ResolvedInboxOptions,
    private readonly inbox: OutboxInboxService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.options.retentionMs !== false) this.schedule();
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Deletes every id older than the retention; resolves with how many it deleted. */
  async sweep(): Promise<number> {
    const keepMs = this.options.retentionMs;
    if (keepMs === false) return 0;
    const { dialect, table, executor } = this.inbox;
    let deleted = 0;
    for (;;) {
      const { affected } = await executor.run(dialect.inbox.purge(table, keepMs, INBOX_RETENTION_BATCH));
      deleted += affected;
      if (affected < INBOX_RETENTION_BATCH || this.stopped) return deleted;
    }
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.sweep()
        .then(
          () => undefined,
          (error: unknown) =>
            this.logger.warn(
              `Inbox retention failed, tried again in ${this.options.retentionIntervalMs} ms: ${redactSecrets(describeErrorChain(error))}`,
            ),
        )
        .finally(() => {
          this.running = undefined;
          this.schedule();
        });
    }, this.options.retentionIntervalMs);
    this.timer.unref();
  }
}
