import { Inject, Injectable, type Logger, Optional } from '@nestjs/common';
import { OUTBOX_ERROR_TEXT } from '../outbox.constants';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { filter, Subject, type Observable } from 'rxjs';
import { ErrorText } from '../utils/error-text';
import { IsolatedObservable } from './isolated-observable';
import type { OutboxLifecycleEvent, OutboxLifecycleEventType } from './lifecycle-event';

type WithoutAt<E> = E extends unknown ? Omit<E, 'at'> : never;

/** An event as its emitter builds it: `at` is added on emission. */
export type OutboxLifecycleEventInput = WithoutAt<OutboxLifecycleEvent>;

/** What the outbox's metrics read events with (see `OutboxEvents.addMeter`); it must not keep them. */
export type OutboxMeter = (event: OutboxLifecycleEventInput) => void;

/**
 * The lifecycle of this outbox's events, as a stream (see `OutboxLifecycleEvent`). One per
 * `OutboxModule`; inject it where the module is visible.
 *
 * Events are emitted synchronously, on the path of the publish commit and of delivery: subscribers
 * run inline, so keep them short and hand slow work off (a promise they return is not awaited; its
 * rejection is logged). What a subscriber throws or rejects with is logged and goes no further: it
 * never fails a publish or a delivery, nor stops the stream for the others. With no subscriber, the
 * emitters build nothing.
 */
@Injectable()
export class OutboxEvents {
  private readonly errorText: OutboxErrorText;
  /** What a subscriber's failure is logged with: its text passes `redactError` too. */
  private readonly logger: Logger;

  /** `errorText`: the module's; without it (an `OutboxEvents` made by hand), the outbox's own redaction alone. */
  constructor(@Optional() @Inject(OUTBOX_ERROR_TEXT) errorText?: OutboxErrorText) {
    this.errorText = errorText ?? new ErrorText();
    this.logger = this.errorText.logger('OutboxEvents');
  }
  private readonly subject = new Subject<OutboxLifecycleEvent>();

  /** Every lifecycle event from the moment of subscription (nothing is replayed). */
  readonly events$: Observable<OutboxLifecycleEvent> = new IsolatedObservable<OutboxLifecycleEvent>(
    (subscriber) => this.subject.subscribe(subscriber),
    (error) => this.subscriberFailed(error),
  );

  /** The events of the given types, typed accordingly. */
  ofType<K extends OutboxLifecycleEventType>(...types: K[]): Observable<Extract<OutboxLifecycleEvent, { type: K }>> {
    return this.events$.pipe(
      filter((event): event is Extract<OutboxLifecycleEvent, { type: K }> => (types as string[]).includes(event.type)),
    );
  }

  /** Whether anyone listens. Emitters check it before building an event, so that none costs anything. */
  get observed(): boolean {
    return this.meters.length > 0 || this.subject.observed;
  }

  /**
   * Whether anyone listens for events of `type`: a subscriber of the stream, or a meter that reads them.
   * For the emitters of events built per delivery that no meter reads.
   */
  wants(type: OutboxLifecycleEventType): boolean {
    return this.subject.observed || this.metered.has(type);
  }

  /**
   * The outbox's own metrics: each gets every event as its emitter built it, before and without the
   * stream (no copy, no timestamp, no subscriber chain: the cost of a metric per delivery stays that of
   * the metric). `reads`: the types it reads (see `wants`). Returns the function that takes it off.
   */
  addMeter(meter: OutboxMeter, reads: readonly OutboxLifecycleEventType[]): () => void {
    const entry = { meter, reads };
    this.meters = [...this.meters, entry];
    this.metered = new Set(this.meters.flatMap((m) => m.reads));
    return () => {
      this.meters = this.meters.filter((m) => m !== entry);
      this.metered = new Set(this.meters.flatMap((m) => m.reads));
    };
  }
  private meters: ReadonlyArray<{ meter: OutboxMeter; reads: readonly OutboxLifecycleEventType[] }> = [];
  private metered: ReadonlySet<OutboxLifecycleEventType> = new Set();

  /** For the outbox's own components. */
  emit(event: OutboxLifecycleEventInput): void {
    for (const { meter } of this.meters) {
      try {
        meter(event);
      } catch (error) {
        this.subscriberFailed(error);
      }
    }
    if (!this.subject.observed) return;
    // Every error an event carries passes the application's redactError on its way out.
    const cleaned =
      'error' in event && typeof event.error === 'string'
        ? { ...event, error: this.errorText.redact(event.error) }
        : event;
    this.subject.next({ ...cleaned, at: new Date() });
  }

  private subscriberFailed(error: unknown): void {
    try {
      this.logger.error(`An OutboxEvents subscriber failed (delivery goes on): ${this.errorText.describe(error)}`);
    } catch {
      // A logger that throws must not reach the emitter either.
    }
  }
}
