import { AsyncLocalStorage } from 'node:async_hooks';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';

/** The event a handler or route is running for, as `currentOutboxMessage()` gives it. */
export interface OutboxMessageContext {
  readonly eventId: string;
  readonly topic: string;
  /** The event's key; null for an event published without one. */
  readonly key: string | null;
  /** Which attempt this is, from 1. */
  readonly attempt: number;
}

const running = new AsyncLocalStorage<ClaimedEvent>();

/**
 * The event whose handler (or route) is running, in the code it calls and what that awaits, or
 * undefined elsewhere: for a logger's mixin, so that the application's own lines carry the event
 * (`LoggerModule.forRoot({ pinoHttp: { mixin: () => currentOutboxMessage() ?? {} } })` of nestjs-pino).
 */
export function currentOutboxMessage(): OutboxMessageContext | undefined {
  const event = running.getStore();
  return event && { eventId: event.id, topic: event.topic, key: event.key, attempt: event.attempts };
}

/** Calls `call` with `arg` (one target's run on `event`, with its message) with `event` as the current message. */
export function runForEvent<A, T>(event: ClaimedEvent, call: (arg: A) => T, arg: A): T {
  return running.run(event, call, arg);
}
