import { performance } from 'node:perf_hooks';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxTestingHooks } from '../interfaces/outbox-options.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { OutboxHandlerTimeoutError } from '../errors/outbox.errors';
import { snapshotMessage } from '../utils/message-snapshot';
import { DeliveredMessage } from './delivered-message';
import { runForEvent } from './delivery-context';
import { HandlerWatchdog } from './handler-watchdog';
import type { OutboxEvents } from '../events/outbox-events';
import type { DeliveryTarget } from './delivery-targets';

/** How one target's run ended: no `error` key means it succeeded. */
export interface HandlerOutcome {
  handler: DeliveryTarget;
  error?: unknown;
}

/** Runs one delivery target on one event: its own message, its timeout, its abort signal. */
export class HandlerInvoker {
  /** Every call's timeout, on one timer. */
  private readonly watchdog = new HandlerWatchdog();

  constructor(
    private readonly events: OutboxEvents,
    private readonly errorText: OutboxErrorText,
    private readonly testing?: OutboxTestingHooks,
  ) {}

  /**
   * Calls `handler` at once with `message`, and `done` once with the outcome: a handler's exception,
   * rejection or timeout becomes its `error`, never a throw. The message's abort belongs to this call:
   * shutdown and a lost lease abort the run through it (its signal is built only if the handler reads
   * `message.signal`), and `giveUp` also ends the wait for the outcome. A callback rather than a
   * promise: this runs once per delivery, and each promise more is paid for by every event.
   */
  invoke(handler: DeliveryTarget, message: DeliveredMessage, done: (outcome: HandlerOutcome) => void): void {
    const abort = DeliveredMessage.abortOf(message);
    // Under OutboxTesting: the message as the handler got it, before it could change it.
    const seen = this.testing && handler.kind === 'handler' ? snapshotMessage(message) : undefined;
    // Timed only while someone listens for the outcome.
    const started = this.events.observed ? performance.now() : -1;
    let settled = false;
    const settle = (error: unknown, failed: boolean) => {
      if (settled) return;
      settled = true;
      watch.end();
      const outcome: HandlerOutcome = failed ? { handler, error } : { handler };
      if (started >= 0) this.emitRun(DeliveredMessage.eventOf(message), outcome, performance.now() - started);
      if (seen) this.testing!.handlerCalled(handler.name, seen, outcome.error);
      done(outcome);
    };
    const watch = this.watchdog.watch(handler.timeoutMs, () => {
      // A transactional handler that is committing: its outcome is the commit's.
      if (abort.committing) return;
      const error = new OutboxHandlerTimeoutError(handler.timeoutMs);
      abort.abort(error);
      settle(error, true);
    });
    // A lost lease ends the wait at once too (see LeaseRenewal).
    abort.onGiveUp = (reason) => {
      if (!abort.committing) settle(reason, true);
    };
    let result: unknown;
    try {
      result = runForEvent(DeliveredMessage.eventOf(message), () => handler.invoke(message), undefined);
    } catch (error) {
      settle(error, true);
      return;
    }
    if (isThenable(result)) {
      result.then(
        () => settle(undefined, false),
        (error: unknown) => settle(error, true),
      );
    } else {
      settle(undefined, false);
    }
  }

  private emitRun(event: ClaimedEvent, outcome: HandlerOutcome, durationMs: number): void {
    // Built whole, without a spread: one object per call, on every delivery while metrics are on.
    const { id, topic, attempts: attempt } = event;
    const handler = outcome.handler.name;
    const { errorText } = this;
    this.events.emit(
      'error' in outcome
        ? { type: 'handler.failed', id, topic, handler, attempt, durationMs, error: errorText.describe(outcome.error) }
        : { type: 'handler.succeeded', id, topic, handler, attempt, durationMs },
    );
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
