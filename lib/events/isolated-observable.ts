import { Observable, Subscriber, type Observer, type Operator, type Subscription, type TeardownLogic } from 'rxjs';

/** Where a subscriber's own failure goes instead of into the code that emitted. */
export type SubscriberFailure = (error: unknown) => void;

type Next<T> = ((value: T) => void) | null | undefined;

/**
 * A subscriber of another chain (an operator's inner subscriber, `firstValueFrom`'s): it is part of
 * that chain's plumbing and must stay linked to it, so it is passed through. Tested by shape, as RxJS
 * does, so a subscriber from another copy of RxJS is recognised too.
 */
function isChainSubscriber(value: unknown): value is Subscriber<unknown> {
  if (value instanceof Subscriber) return true;
  const v = value as Record<string, unknown> | null | undefined;
  return (
    !!v &&
    typeof v.next === 'function' &&
    typeof v.error === 'function' &&
    typeof v.complete === 'function' &&
    typeof v.unsubscribe === 'function' &&
    typeof v.add === 'function' &&
    typeof v.remove === 'function'
  );
}

/**
 * An Observable whose subscribers cannot hurt the code that emits, nor each other.
 *
 * RxJS catches what a subscriber's `next` throws and rethrows it from a timer (`reportUnhandledError`):
 * an uncaught exception that ends the process. An `async` subscriber's rejection is an unhandled
 * rejection, which ends it too. So every consumer's callbacks are wrapped where they are subscribed —
 * to this stream or, through `lift`, to any chain of operators built on it — and their failures,
 * thrown or rejected, go to `onFailure`. A consumer with no `error` callback has its chain's errors
 * (an operator that threw) sent there as well; that subscription ends, as RxJS ends it, the others go on.
 */
export class IsolatedObservable<T> extends Observable<T> {
  constructor(
    subscribe: ((this: Observable<T>, subscriber: Subscriber<T>) => TeardownLogic) | undefined,
    private readonly onFailure: SubscriberFailure,
  ) {
    super(subscribe);
  }

  // Operators applied with pipe() build their Observable through lift: keep the isolation on it.
  override lift<R>(operator?: Operator<T, R>): Observable<R> {
    const lifted = new IsolatedObservable<R>(undefined, this.onFailure);
    lifted.source = this;
    lifted.operator = operator;
    return lifted;
  }

  override subscribe(
    observerOrNext?: Partial<Observer<T>> | Next<T>,
    error?: ((error: unknown) => void) | null,
    complete?: (() => void) | null,
  ): Subscription {
    if (isChainSubscriber(observerOrNext)) return super.subscribe(observerOrNext);
    const target: Partial<Observer<T>> =
      typeof observerOrNext === 'function' || observerOrNext == null
        ? { next: observerOrNext ?? undefined, error: error ?? undefined, complete: complete ?? undefined }
        : observerOrNext;
    return super.subscribe({
      next: (value) => this.guard(() => target.next?.(value)),
      error: (failure) => (target.error ? this.guard(() => target.error!(failure)) : this.onFailure(failure)),
      complete: () => this.guard(() => target.complete?.()),
    });
  }

  private guard(call: () => unknown): void {
    try {
      const result = call() as PromiseLike<unknown> | undefined;
      if (result && typeof result.then === 'function') result.then(undefined, this.onFailure);
    } catch (failure) {
      this.onFailure(failure);
    }
  }
}
