import { performance } from 'node:perf_hooks';
import type { StoredEvent } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxMessage } from '../interfaces/outbox-message.interface';
import type { OutboxTestingHooks } from '../interfaces/outbox-options.interface';
import { describeError } from '../utils/describe-error';
import { snapshotMessage } from '../utils/message-snapshot';
import { LazyAbort } from './lazy-abort';
import type { OutboxEvents } from '../events/outbox-events';
import type { DeliveryTarget } from './delivery-targets';

/** How one target's run ended: no `error` key means it succeeded. */
export interface HandlerOutcome {
  handler: DeliveryTarget;
  error?: unknown;
}

class OutboxHandlerTimeoutError extends Error {
  constructor(ms: number) {
    super(`handler did not finish within its timeout of ${ms} ms`);
    this.name = 'OutboxHandlerTimeoutError';
  }
}

/** Runs one delivery target on one event: its own message, its timeout, its abort signal. */
export class HandlerInvoker {
  constructor(
    private readonly events: OutboxEvents,
    private readonly testing?: OutboxTestingHooks,
  ) {}

  /**
   * Never rejects: a handler's exception, rejection or timeout becomes the outcome's `error`.
   * `running` holds the abort of every run in progress, so shutdown can abort them.
   */
  async invoke(
    handler: DeliveryTarget,
    event: StoredEvent,
    running: Set<LazyAbort>,
    copyPayload: boolean,
  ): Promise<HandlerOutcome> {
    // Aborted by the timeout below, a lost lease or shutdown; built only if the handler reads `signal`.
    const abort = new LazyAbort();
    running.add(abort);
    const message = {
      id: event.id,
      topic: event.topic,
      key: event.key,
      // Each handler gets its own copy, so one cannot change what the next one sees.
      payload: copyPayload ? structuredClone(event.payload) : event.payload,
      headers: { ...event.headers },
      attempt: event.attempts,
      createdAt: event.createdAt,
      get signal() {
        return abort.signal;
      },
    } satisfies OutboxMessage;
    // Under OutboxTesting: the message as the handler got it, before it could change it.
    const seen = this.testing && handler.kind === 'handler' ? snapshotMessage(message) : undefined;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      // A lost lease ends the wait at once too (see LeaseRenewal).
      abort.onGiveUp = reject;
      timer = setTimeout(() => {
        const error = new OutboxHandlerTimeoutError(handler.timeoutMs);
        abort.abort(error);
        reject(error);
      }, handler.timeoutMs);
    });
    // Timed only while someone listens for the outcome.
    const started = this.events.observed ? performance.now() : -1;
    let outcome: HandlerOutcome;
    try {
      await Promise.race([Promise.resolve().then(() => handler.invoke(message)), timedOut]);
      outcome = { handler };
    } catch (error) {
      outcome = { handler, error };
    } finally {
      clearTimeout(timer);
      running.delete(abort);
    }
    if (started >= 0) this.emitRun(event, outcome, performance.now() - started);
    if (seen) this.testing!.handlerCalled(handler.name, seen, outcome.error);
    return outcome;
  }

  private emitRun(event: StoredEvent, outcome: HandlerOutcome, durationMs: number): void {
    const run = { id: event.id, topic: event.topic, handler: outcome.handler.name, attempt: event.attempts, durationMs };
    this.events.emit(
      'error' in outcome
        ? { type: 'handler.failed', ...run, error: describeError(outcome.error) }
        : { type: 'handler.succeeded', ...run },
    );
  }
}
