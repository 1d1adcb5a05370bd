import { performance } from 'node:perf_hooks';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxTestingHooks } from '../interfaces/outbox-options.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { OutboxHandlerTimeoutError } from '../errors/outbox.errors';
import { snapshotMessage } from '../utils/message-snapshot';
import { DeliveredMessage } from './delivered-message';
import { runForEvent } from './delivery-context';
import { HandlerWatchdog, type Watch } from './handler-watchdog';
import type { LazyAbort } from './lazy-abort';
import type { RecordedOutboxMessage } from '../interfaces/outbox-message.interface';
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
   * promise, and one object for the call's state rather than a closure for each thing that may end it:
   * this runs once per delivery.
   */
  invoke(handler: DeliveryTarget, message: DeliveredMessage, done: (outcome: HandlerOutcome) => void): void {
    const call = new HandlerCall(this, handler, message, done);
    call.start(this.watchdog);
  }

  /** Under OutboxTesting, what a handler was given (before it could change it), else undefined. */
  seen(handler: DeliveryTarget, message: DeliveredMessage): RecordedOutboxMessage | undefined {
    return this.testing && handler.kind === 'handler' ? snapshotMessage(message) : undefined;
  }

  /** Reports a call's outcome to whoever listens: the run's event (timed), and OutboxTesting. */
  ended(call: HandlerCall, outcome: HandlerOutcome): void {
    if (call.startedAt >= 0) {
      this.emitRun(DeliveredMessage.eventOf(call.message), outcome, performance.now() - call.startedAt);
    }
    if (call.seen) this.testing!.handlerCalled(outcome.handler.name, call.seen, outcome.error);
  }

  /** Whether a call's outcome is timed: only while someone listens for it. */
  get timed(): boolean {
    return this.events.observed;
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

/**
 * One target's call on one message, from its start to its one outcome, whichever ends it first: the
 * handler returning or throwing, its promise settling, its timeout (the watchdog's `expire`), or its
 * lease lost (the abort's `gaveUp`).
 */
class HandlerCall {
  private settled = false;
  private watch: Watch | undefined;
  private readonly abort: LazyAbort;
  /** Under OutboxTesting: the message as the handler got it, before it could change it. */
  readonly seen: RecordedOutboxMessage | undefined;
  /** When it started (performance.now()), while someone listens for outcomes; else -1. */
  readonly startedAt: number;

  constructor(
    private readonly invoker: HandlerInvoker,
    readonly handler: DeliveryTarget,
    readonly message: DeliveredMessage,
    private readonly done: (outcome: HandlerOutcome) => void,
  ) {
    this.abort = DeliveredMessage.abortOf(message);
    this.seen = invoker.seen(handler, message);
    this.startedAt = invoker.timed ? performance.now() : -1;
  }

  start(watchdog: HandlerWatchdog): void {
    this.watch = watchdog.watch(this.handler.timeoutMs, this);
    // A lost lease ends the wait at once too (see LeaseRenewal).
    this.abort.onGiveUp = this;
    let result: unknown;
    try {
      result = runForEvent(DeliveredMessage.eventOf(this.message), callHandler, this);
    } catch (error) {
      this.settle(error, true);
      return;
    }
    if (isThenable(result)) {
      result.then(
        () => this.settle(undefined, false),
        (error: unknown) => this.settle(error, true),
      );
    } else {
      this.settle(undefined, false);
    }
  }

  /** Its timeout passed first. */
  expire(): void {
    // A transactional handler that is committing: its outcome is the commit's.
    if (this.abort.committing) return;
    const error = new OutboxHandlerTimeoutError(this.handler.timeoutMs);
    this.abort.abort(error);
    this.settle(error, true);
  }

  /** Its lease was lost: the run is given up, whatever the handler still does. */
  gaveUp(reason: unknown): void {
    if (!this.abort.committing) this.settle(reason, true);
  }

  private settle(error: unknown, failed: boolean): void {
    if (this.settled) return;
    this.settled = true;
    this.watch?.end();
    const outcome: HandlerOutcome = failed ? { handler: this.handler, error } : { handler: this.handler };
    this.invoker.ended(this, outcome);
    this.done(outcome);
  }
}

/** The handler's own call, with the call as the argument: no closure per call. */
function callHandler(call: HandlerCall): unknown {
  return call.handler.invoke(call.message);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
