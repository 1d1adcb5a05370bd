import type { TargetRetry } from '../interfaces/outbox-options.interface';
import { Inject, Injectable } from '@nestjs/common';
import type { OutboxHandlerFn } from '../interfaces/outbox-message.interface';
import { OUTBOX_OPTIONS } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import { TransportRegistry } from '../transports/transport-registry';
import { topicMatches } from '../utils/topic';
import type { OutboxTracer } from '../interfaces/outbox-tracing.interface';
import { DeliveredMessage } from './delivered-message';
import { TargetActivity, TargetBound } from './target-bound';

/** Something an event is delivered to: a discovered handler, or a route to a transport. */
export interface DeliveryTarget {
  /** Stable name recorded when the delivery succeeds: `Class.method`, or `transport:<name>`. */
  name: string;
  /** A discovered `@OutboxHandler()` method, or a route to a transport. */
  kind: 'handler' | 'route';
  timeoutMs: number;
  retry: TargetRetry;
  /** How many of its calls run at once here: one per `@OutboxHandler()` and per route, whatever the topic. */
  bound: TargetBound;
  invoke: OutboxHandlerFn;
}

/** Topics seen are few in practice; the cap keeps a flood of distinct topics from growing memory. */
const TARGET_CACHE_LIMIT = 10_000;

/**
 * What a topic's events are delivered to: the handlers registered for it (by the explorer, at module
 * init) and the transport of every route whose pattern matches it, resolved once per topic.
 */
@Injectable()
export class DeliveryTargets {
  private readonly handlers = new Map<string, DeliveryTarget[]>();
  private readonly cache = new Map<string, readonly DeliveryTarget[]>();
  /** A route's bound holds for every topic it matches. */
  private readonly routeBounds: TargetBound[];
  /** When each target last started a call, shared by all of them. */
  private readonly activity = new TargetActivity();

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly transports: TransportRegistry,
  ) {
    this.routeBounds = options.routes.map((route) => this.bound(route.concurrency));
  }

  private bound(concurrency: number): TargetBound {
    return new TargetBound(concurrency, this.activity);
  }

  hasHandler(topic: string, name: string): boolean {
    return this.handlers.get(topic)?.some((h) => h.name === name) ?? false;
  }

  addHandler(topic: string, handler: Omit<DeliveryTarget, 'kind' | 'bound'> & { concurrency: number }): void {
    const handlers = this.handlers.get(topic) ?? [];
    const { concurrency, ...target } = handler;
    handlers.push({ ...target, kind: 'handler', bound: this.bound(concurrency) });
    this.handlers.set(topic, handlers);
    this.cache.clear();
  }

  forTopic(topic: string): readonly DeliveryTarget[] {
    const cached = this.cache.get(topic);
    if (cached) return cached;
    const targets: DeliveryTarget[] = [...(this.handlers.get(topic) ?? [])];
    const { tracing } = this.options;
    for (const [i, route] of this.options.routes.entries()) {
      const name = `transport:${route.transport}`;
      if (!topicMatches(route.topic, topic) || targets.some((t) => t.name === name)) continue;
      targets.push({
        name,
        kind: 'route',
        timeoutMs: route.timeoutMs,
        retry: route.retry,
        bound: this.routeBounds[i],
        invoke: tracing ? forwarding(tracing, this.transports.sender(route)) : this.transports.sender(route),
      });
    }
    if (this.cache.size >= TARGET_CACHE_LIMIT) this.cache.clear();
    this.cache.set(topic, targets);
    return targets;
  }
}

/**
 * A route's sender that hands its transport the message with the attempt's span as its trace context
 * (the one active when it is called), so a consumer continues the trace from the delivery.
 */
function forwarding(tracing: OutboxTracer, send: OutboxHandlerFn): OutboxHandlerFn {
  return (message) => {
    const { traceContext } = DeliveredMessage.eventOf(message as DeliveredMessage);
    // This target's own message: the event's headers, and the next target's, are left as they were.
    message.headers = tracing.forward(message.headers, traceContext);
    return send(message);
  };
}
