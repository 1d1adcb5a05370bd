import type { OutboxMessage } from '../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../interfaces/outbox-transport.interface';

interface Pending {
  item: { message: OutboxMessage; route: OutboxRoute };
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Gathers the sends to one transport that start in the same turn of the event loop — the worker
 * starts up to `concurrency` deliveries at once — and hands them to `sendMany` together.
 */
export class SendBatcher {
  private queue: Pending[] = [];

  constructor(
    private readonly name: string,
    private readonly sendMany: NonNullable<OutboxTransport['sendMany']>,
  ) {}

  send(message: OutboxMessage, route: OutboxRoute): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(() => void this.flush());
      this.queue.push({ item: { message, route }, resolve, reject });
    });
  }

  private async flush(): Promise<void> {
    const batch = this.queue;
    this.queue = [];
    let results: PromiseSettledResult<void>[];
    try {
      results = await this.sendMany(batch.map((p) => p.item));
    } catch (error) {
      for (const p of batch) p.reject(error);
      return;
    }
    batch.forEach((p, i) => {
      const result = results[i];
      if (result?.status === 'fulfilled') p.resolve();
      else if (result) p.reject(result.reason);
      else {
        p.reject(new Error(`transport ${this.name}: sendMany settled ${results.length} of ${batch.length} items`));
      }
    });
  }
}
