import type * as Otel from '@opentelemetry/api';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { PublishResult } from '../interfaces/outbox-message.interface';
import type {
  OutboxAttemptOutcome,
  OutboxAttemptSpan,
  OutboxTracer,
  TracedEvent,
} from '../interfaces/outbox-tracing.interface';
import { describeValue } from '../utils/describe-value';
import { booleanOption, isPlainObject, optionSection } from '../utils/option-checks';
import { packageRequire } from '../utils/package-require';
import { fitTraceContext, MAX_TRACE_CONTEXT_LENGTH, MAX_TRACE_FIELD_LENGTH } from './trace-context';

type OtelApi = typeof Otel;

/** The instrumentation scope of the outbox's spans and metrics: the package's name. */
export const OUTBOX_INSTRUMENTATION_SCOPE = 'nestjs-typeorm-outbox';

/**
 * The `tracing` option resolved: an OpenTelemetry tracer, or undefined (off). Without the option, on
 * when `@opentelemetry/api` is installed — it traces only once the application registers a tracer
 * provider, and costs next to nothing before — and off when it is not; `true` or an object requires it.
 */
export function resolveTracing(value: unknown, errorText: OutboxErrorText): OutboxTracer | undefined {
  if (value === false) return undefined;
  if (value === undefined) {
    const api = loadOpenTelemetry(false);
    return api && new OpenTelemetryTracer(api, { link: false, publishSpans: true }, errorText);
  }
  if (value !== true && !isPlainObject(value)) {
    throw new OutboxConfigurationError(
      'tracing',
      `expected true, false or an object such as { link: true }, got ${describeValue(value)}`,
    );
  }
  const section = value === true ? {} : optionSection('tracing', value, ['link', 'publishSpans']);
  const choices = {
    link: booleanOption('tracing.link', section.link, false),
    publishSpans: booleanOption('tracing.publishSpans', section.publishSpans, true),
  };
  return new OpenTelemetryTracer(loadOpenTelemetry(true)!, choices, errorText);
}

function loadOpenTelemetry(required: boolean): OtelApi | undefined {
  try {
    return packageRequire('@opentelemetry/api') as OtelApi;
  } catch (error) {
    if (!required && (error as { code?: string }).code === 'MODULE_NOT_FOUND') return undefined;
    throw new OutboxConfigurationError(
      'tracing',
      `needs the @opentelemetry/api package, which could not be loaded (npm install @opentelemetry/api): ${String(error)}`,
    );
  }
}

/**
 * Traces through the OpenTelemetry API: each publish is a producer span (`create <topic>`) whose context
 * travels with the event, apart from its headers (the propagators the application registered write it:
 * W3C `traceparent`, `tracestate` and `baggage` by default), and each delivery attempt is a consumer span
 * (`process <topic>`) continuing it — the names and attributes of OpenTelemetry's messaging conventions.
 */
class OpenTelemetryTracer implements OutboxTracer {
  private readonly tracer: Otel.Tracer;
  /** What the API's provider delegates to while no SDK is registered. */
  private readonly noProvider: unknown;
  /** Whether a trace context that did not fit was reported: once per outbox, not per publish. */
  private reportedUnfit = false;

  private readonly link: boolean;
  private readonly publishSpans: boolean;

  constructor(
    private readonly api: OtelApi,
    choices: { link: boolean; publishSpans: boolean },
    private readonly errorText: OutboxErrorText,
  ) {
    this.link = choices.link;
    this.publishSpans = choices.publishSpans;
    // A proxy until the application registers a provider: it follows the provider registered later.
    this.tracer = api.trace.getTracer(OUTBOX_INSTRUMENTATION_SCOPE);
    this.noProvider = new api.ProxyTracerProvider().getDelegate();
  }

  /**
   * Whether the application registered a tracer provider (it may do so after the module starts). Without
   * one a span records nothing, so none is started: the API alone costs a delivery nothing.
   */
  private get registered(): boolean {
    const provider = this.api.trace.getTracerProvider() as Partial<Otel.ProxyTracerProvider>;
    return provider.getDelegate?.() !== this.noProvider;
  }

  async publish(
    items: readonly unknown[],
    insert: (traceContext: string | undefined) => Promise<PublishResult[]>,
  ): Promise<PublishResult[]> {
    if (!this.publishSpans || !this.registered) return insert(this.capture(this.api.context.active()));
    const { api } = this;
    const count = items.length;
    // One destination named when every event has the same topic (a batch of several topics has none).
    const topics = new Set(items.map((item) => (item as { topic?: unknown } | null)?.topic));
    const [only] = topics;
    const topic = topics.size === 1 && typeof only === 'string' ? only : undefined;
    const span = this.tracer.startSpan(topic === undefined ? 'create' : `create ${topic}`, {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        'messaging.system': 'outbox',
        'messaging.operation.type': 'create',
        'messaging.operation.name': 'create',
        ...(topic === undefined ? {} : { 'messaging.destination.name': topic }),
        ...(count === 1 ? {} : { 'messaging.batch.message_count': count }),
      },
    });
    const context = api.trace.setSpan(api.context.active(), span);
    try {
      // The insert's own statements (a database instrumentation's spans) nest under the publish.
      const results = await api.context.with(context, () => insert(this.capture(context)));
      if (results.length === 1) span.setAttribute('messaging.message.id', results[0].id);
      return results;
    } catch (error) {
      const exception = exceptionOf(error, this.errorText);
      span.addEvent('exception', exception.attributes);
      span.setAttribute('error.type', exception.type);
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: exception.message });
      throw error;
    } finally {
      span.end();
    }
  }

  /** The trace context of `context` as JSON, to be stored beside each event's headers; undefined when there is none. */
  private capture(context: Otel.Context): string | undefined {
    const carrier: Record<string, unknown> = {};
    this.api.propagation.inject(context, carrier);
    // Nothing to carry (no active trace, or no propagator registered).
    if (isEmpty(carrier)) return undefined;
    const fitted = fitTraceContext(carrier);
    if (fitted.left.length > 0 && !this.reportedUnfit) {
      this.reportedUnfit = true;
      const text =
        `The trace context of a publish did not fit: ${fitted.left.join(', ')}. An event keeps fields of printable ` +
        `ASCII text, of at most ${MAX_TRACE_FIELD_LENGTH} characters each and ${MAX_TRACE_CONTEXT_LENGTH} in all; ` +
        'the events were published with the rest. Logged once.';
      this.errorText.logger('OutboxTracing').warn(text);
    }
    return fitted.json;
  }

  startAttempt(event: TracedEvent): OutboxAttemptSpan | undefined {
    if (!this.registered) return undefined;
    const { api } = this;
    // Without a trace context of its own (published outside a trace, or by a version that kept it in
    // the headers), the headers are read: nothing to read when there are none.
    const carrier = event.traceContext ?? (isEmpty(event.headers) ? undefined : event.headers);
    const captured = carrier ? api.propagation.extract(api.ROOT_CONTEXT, carrier) : api.ROOT_CONTEXT;
    const publisher = this.link ? api.trace.getSpanContext(captured) : undefined;
    // Linked: a trace of its own (the baggage carried on).
    const parent = this.link ? api.trace.deleteSpan(captured) : captured;
    // The sampler sees the attributes every attempt has; the event's own are built only for a span
    // that records (a sampler of production's drops most, and each would cost its attributes).
    const span = this.tracer.startSpan(
      `process ${event.topic}`,
      {
        kind: api.SpanKind.CONSUMER,
        attributes: ATTEMPT_ATTRIBUTES,
        links: publisher ? [{ context: publisher }] : undefined,
      },
      parent,
    );
    // Not sampled: no span to carry. The handlers run in the worker's context (a span they start makes
    // its own sampling decision), and a transport forwards the publisher's context as it was captured.
    if (!span.isRecording()) return undefined;
    span.setAttributes({
      'messaging.destination.name': event.topic,
      'messaging.message.id': event.id,
      'outbox.attempt': event.attempts,
    });
    return new AttemptSpan(api, span, api.trace.setSpan(parent, span), this.errorText);
  }

  forward(headers: Record<string, string>, traceContext: Record<string, string> | null): Record<string, string> {
    // No provider, or no span recording (not sampled): the publisher's context goes on as it was
    // captured (the event's own headers win).
    if (!this.registered || !this.api.trace.getActiveSpan()?.isRecording()) {
      return traceContext ? { ...traceContext, ...headers } : headers;
    }
    const carrier = { ...headers };
    this.api.propagation.inject(this.api.context.active(), carrier);
    return carrier;
  }
}

/** What every delivery attempt's span says, given to the sampler. */
const ATTEMPT_ATTRIBUTES: Otel.Attributes = Object.freeze({
  'messaging.system': 'outbox',
  'messaging.operation.type': 'process',
  'messaging.operation.name': 'process',
});

class AttemptSpan implements OutboxAttemptSpan {
  private firstError: { type: string; message: string } | undefined;

  constructor(
    private readonly api: OtelApi,
    private readonly span: Otel.Span,
    private readonly context: Otel.Context,
    private readonly errorText: OutboxErrorText,
  ) {}

  run<T>(fn: () => T): T {
    return this.api.context.with(this.context, fn);
  }

  failed(target: string, error: unknown): void {
    if (!this.span.isRecording()) return;
    const exception = exceptionOf(error, this.errorText);
    this.span.addEvent('exception', { ...exception.attributes, 'outbox.target': target });
    this.firstError ??= { type: exception.type, message: exception.message };
  }

  end(outcome: OutboxAttemptOutcome): void {
    const { span } = this;
    span.setAttribute('outbox.outcome', outcome);
    if (outcome !== 'success' && outcome !== 'deferred') {
      span.setAttribute('error.type', this.firstError?.type ?? outcome);
      span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: this.firstError?.message ?? outcome });
    }
    span.end();
  }
}

/** An error as a span's `exception` event tells it: the texts the outbox stores and logs (redacted, then the application's redactError). */
function exceptionOf(error: unknown, errorText: OutboxErrorText) {
  const name = (error as { name?: unknown } | null)?.name;
  const type = typeof name === 'string' && name !== '' ? name : typeof error;
  const message = errorText.describe(error);
  const stack = errorText.describeStack(error);
  const attributes: Otel.Attributes = {
    'exception.type': type,
    'exception.message': message,
    ...(stack !== undefined ? { 'exception.stacktrace': stack } : {}),
  };
  return { type, message, attributes };
}

function isEmpty(fields: Record<string, unknown>): boolean {
  for (const _ in fields) return false;
  return true;
}
