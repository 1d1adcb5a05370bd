import { OutboxLeaseLostError } from '../errors/outbox.errors';
import type { OutboxHandlerFn, OutboxIsolationLevel } from '../interfaces/outbox-message.interface';
import type { TransactionOpener } from '../publishing/transaction-opener';
import type { OutboxStore } from '../store/outbox.store';
import { DeliveredMessage } from './delivered-message';

/**
 * A handler run in a transaction of its own (`@OutboxHandler(topic, { transactional: true })`): once it
 * returns, its success is recorded in that transaction — the handler added to the event's completed
 * targets, fenced by the claim's token — and both commit together. A crash before the commit leaves
 * neither, so the retry starts clean; after it, the retry skips the handler. A handler that throws,
 * times out, loses its claim or is stopped by shutdown leaves nothing: its transaction rolls back.
 */
export function transactionalTarget(
  handler: OutboxHandlerFn,
  name: string,
  isolation: OutboxIsolationLevel | undefined,
  opener: TransactionOpener,
  store: OutboxStore,
): OutboxHandlerFn {
  return (message) => {
    const delivered = message as DeliveredMessage;
    const abort = DeliveredMessage.abortOf(delivered);
    return opener.run(isolation, async (manager) => {
      DeliveredMessage.joined(delivered, manager);
      await handler(message);
      // Timed out, its claim lost, or stopped by shutdown while it ran: the attempt is recorded apart
      // (as a failure, or not at all), so its writes must not stay.
      const aborted = abort.abortedWith;
      if (aborted) throw aborted.reason;
      // From here its outcome is the commit's: a timeout or a lost lease no longer settles it (see HandlerInvoker).
      abort.committing = true;
      const { id } = DeliveredMessage.eventOf(delivered);
      if (!(await store.complete(manager, id, DeliveredMessage.tokenOf(delivered), name))) {
        throw new OutboxLeaseLostError(id);
      }
    });
  };
}
