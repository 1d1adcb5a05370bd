import type { EntitySubscriberInterface, QueryRunner } from 'typeorm';
import type { WakeUpChannel } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxEvents } from '../events/outbox-events';

/** An event published in a transaction not yet committed, at the savepoint depth it was written in. */
export interface PublishedEntry {
  id: string;
  topic: string;
  depth: number;
}

/** TypeORM counts nested transactions (savepoints) on the query runner; its type keeps the count protected. */
export function transactionDepth(runner: QueryRunner): number {
  return (runner as unknown as { transactionDepth?: number }).transactionDepth ?? 1;
}

/**
 * Sees the outermost commit of transactions that published to one table: the moment their events
 * become claimable, so the local worker and other instances can look at once. Registered as a TypeORM
 * subscriber; the publishing transaction is marked on its query runner.
 */
export class CommitWatcher {
  /** Marks, on a query runner, a transaction that published to this table. */
  private readonly publishedKey: string;
  private readonly listeners: Array<() => void> = [];

  constructor(
    tablePath: string,
    private readonly events: OutboxEvents,
    private readonly wakeUp: WakeUpChannel | undefined,
  ) {
    this.publishedKey = `outbox:published:${tablePath}`;
  }

  /** Calls `listener` after every commit of a transaction that published events. */
  onCommitted(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Events became claimable (a commit, an operator's redrive): workers look now, here and on other instances. */
  madeDue(): void {
    this.wakeUp?.notify();
    for (const listener of this.listeners) listener();
  }

  /**
   * Marks `runner`'s transaction as one that publishes here, and returns the list its published events
   * go into (for the `published` lifecycle event at the commit).
   */
  published(runner: QueryRunner): PublishedEntry[] {
    const data = runner.data as Record<string, PublishedEntry[] | undefined> | undefined;
    const marked = data?.[this.publishedKey];
    if (marked) return marked;
    const published: PublishedEntry[] = [];
    runner.data = { ...(data ?? {}), [this.publishedKey]: published };
    return published;
  }

  subscriber(): EntitySubscriberInterface {
    const key = this.publishedKey;
    return {
      afterTransactionCommit: (event) => {
        const runner = event.queryRunner;
        if (runner.isTransactionActive || !runner.data?.[key]) return;
        const published = runner.data[key] as PublishedEntry[];
        delete runner.data[key];
        if (published.length > 0 && this.events.observed) {
          this.events.emit({
            type: 'published',
            ids: published.map((p) => p.id),
            topics: published.map((p) => p.topic),
          });
        }
        this.madeDue();
      },
      afterTransactionRollback: (event) => {
        const runner = event.queryRunner;
        if (!runner.data?.[key]) return;
        if (!runner.isTransactionActive) {
          delete runner.data[key];
          return;
        }
        // A savepoint rolled back (the depth is already the enclosing one's): what it published is gone.
        const depth = transactionDepth(runner);
        runner.data[key] = (runner.data[key] as PublishedEntry[]).filter((p) => p.depth <= depth);
      },
    };
  }
}
