import { OutboxNonRetryableError } from '../../errors/outbox.errors';
import type { OutboxMessage } from '../../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../../interfaces/outbox-transport.interface';
import { describeErrorChain } from '../../utils/describe-error';
import { parseWebhookUrl, resolveWebhookOptions, type WebhookTransportOptions } from './webhook-options';
import { judgeResponse } from './webhook-response';
import { signWebhookBody } from './webhook-signature';

/** W3C Trace Context and Baggage: the event's headers of those names are sent as HTTP headers too. */
const TRACE_HEADERS = ['traceparent', 'tracestate', 'baggage'];

/** The JSON body of every webhook request, serialised with the keys in this order. */
export interface WebhookEnvelope<T = unknown> {
  id: string;
  topic: string;
  key: string | null;
  /** ISO 8601, UTC. */
  createdAt: string;
  attempt: number;
  headers: Record<string, string>;
  payload: T;
}

/**
 * Posts each message as JSON to an HTTP endpoint.
 *
 * Request: `POST <url>` with a {@link WebhookEnvelope} body and the headers `Content-Type:
 * application/json`, `Idempotency-Key: <event id>` (the same on every attempt: receivers drop
 * duplicates by it), `X-Outbox-Topic`, `X-Outbox-Attempt`, `X-Outbox-Key` (when the event has a key),
 * `traceparent`, `tracestate` and `baggage` (when the event's headers have them: with tracing, the
 * delivery's trace context), the configured static headers, and with a `secret` the signature header.
 *
 * Signature: `X-Outbox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` where the HMAC is computed with
 * `secret` over the UTF-8 bytes of `<t>` + `.` + `<raw request body>`. To verify, recompute it over the
 * body exactly as received (not re-serialised JSON), compare in constant time, and reject timestamps
 * far from the current time so a captured request cannot be replayed later. The timestamp is the
 * time of sending, so each attempt carries a fresh one. {@link verifyWebhookSignature} does all this.
 *
 * Outcome: any 2xx delivers. 408, 429 and 5xx are retried, after the `Retry-After` delay when the
 * response has one. Other 4xx and all 3xx dead-letter the event, as does a missing or invalid URL.
 * Network errors and timeouts are retried.
 */
export class WebhookTransport implements OutboxTransport {
  private readonly url: URL | undefined;
  private readonly timeoutMs: number;
  private readonly staticHeaders: Record<string, string>;
  private readonly secret: string | undefined;
  private readonly signatureHeader: string;
  private readonly fetchFn: typeof fetch;

  constructor(
    readonly name: string,
    options: WebhookTransportOptions,
  ) {
    const resolved = resolveWebhookOptions(name, options);
    this.url = resolved.url;
    this.timeoutMs = resolved.timeoutMs;
    this.secret = resolved.secret;
    this.signatureHeader = resolved.signatureHeader;
    this.staticHeaders = resolved.staticHeaders;
    this.fetchFn = resolved.fetchFn;
  }

  async send(message: OutboxMessage, route: OutboxRoute): Promise<void> {
    const url = this.resolveUrl(route);
    const where = `${url.origin}${url.pathname}`;
    const body = serialise(message);

    const headers: Record<string, string> = {
      ...this.staticHeaders,
      'Content-Type': 'application/json',
      'Idempotency-Key': message.id,
      'X-Outbox-Topic': message.topic,
      'X-Outbox-Attempt': String(message.attempt),
    };
    if (message.key !== null && message.key !== undefined) headers['X-Outbox-Key'] = message.key;
    // The trace context, so the receiver continues the trace (the attempt's span, with tracing on).
    for (const name of TRACE_HEADERS) {
      const value = message.headers?.[name];
      if (typeof value === 'string') headers[name] = value;
    }
    if (this.secret !== undefined) {
      headers[this.signatureHeader] = signWebhookBody(body, this.secret);
    }

    const timeoutReason = new Error(`timed out after ${this.timeoutMs} ms`);
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(timeoutReason), this.timeoutMs);
    const signal = AbortSignal.any([message.signal, timeout.signal]);
    try {
      let response: Response;
      try {
        response = await this.fetchFn(url, { method: 'POST', headers, body, signal, redirect: 'manual' });
      } catch (error) {
        if (signal.aborted && signal.reason === timeoutReason) {
          throw new Error(`webhook request to ${where} timed out after ${this.timeoutMs} ms`, { cause: error });
        }
        if (message.signal.aborted) {
          throw new Error(`webhook request to ${where} was aborted: ${describeErrorChain(message.signal.reason)}`, {
            cause: error,
          });
        }
        throw new Error(`webhook request to ${where} failed: ${describeErrorChain(error)}`, { cause: error });
      }
      await judgeResponse(response, url, where);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Start-up check of a route's URL, so a wrong one stops the app instead of dead-lettering events. */
  validateRoute(route: OutboxRoute): void {
    this.resolveUrl(route);
  }

  private resolveUrl(route: OutboxRoute): URL {
    const override = route.options?.url;
    if (override !== undefined) {
      const parsed = parseWebhookUrl(override);
      if (typeof parsed === 'string') {
        throw new OutboxNonRetryableError(
          `Route "${route.topic}" of webhook transport "${this.name}" has an invalid options.url: ${parsed}`,
        );
      }
      return parsed;
    }
    if (this.url) return this.url;
    // Retrying cannot help: the event can only go out once the configuration changes.
    throw new OutboxNonRetryableError(
      `Webhook transport "${this.name}" has no URL for route "${route.topic}": set transports.${this.name}.url ` +
        `or the route's options.url`,
    );
  }
}

function serialise(message: OutboxMessage): string {
  try {
    const envelope: WebhookEnvelope = {
      id: message.id,
      topic: message.topic,
      key: message.key ?? null,
      createdAt: message.createdAt.toISOString(),
      attempt: message.attempt,
      headers: message.headers ?? {},
      // JSON.stringify would drop the key of an undefined payload; receivers should always find it.
      payload: message.payload === undefined ? null : message.payload,
    };
    return JSON.stringify(envelope);
  } catch (error) {
    // Same input, same failure: retrying would only delay the dead letter.
    throw new OutboxNonRetryableError(
      `Event ${message.id} cannot be serialised for a webhook: ${describeErrorChain(error)}`,
      { cause: error },
    );
  }
}
