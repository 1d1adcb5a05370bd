import { createHmac, timingSafeEqual } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import {
  OutboxConfigurationError,
  OutboxNonRetryableError,
  OutboxRetryLaterError,
} from '../../errors/outbox.errors';
import type { OutboxMessage } from '../../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../../interfaces/outbox-transport.interface';
import { integerOption } from '../../outbox.options';
import { describeErrorChain } from '../../utils/describe-error';
import { describeValue } from '../../utils/describe-value';
import { rejectUnknownOptions } from '../../utils/option-keys';

export interface WebhookTransportOptions {
  /** Default endpoint (http or https). A route may override it with `options: { url }`. */
  url?: string;
  /** Time limit of one request, in ms, on top of the route's own time limit. Default 10000. */
  timeoutMs?: number;
  /** Extra headers sent with every request, for example `Authorization`. */
  headers?: Record<string, string>;
  /**
   * Key for HMAC-SHA256 request signatures; see {@link WebhookTransport} for the scheme and
   * {@link verifyWebhookSignature} to check them on the receiving side.
   */
  secret?: string;
  /** Header carrying the signature. Default `X-Outbox-Signature`. */
  signatureHeader?: string;
  /** A `fetch` implementation, for example one bound to a custom undici dispatcher. Default: the global `fetch`. */
  fetch?: typeof fetch;
}

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

export const WEBHOOK_DEFAULT_TIMEOUT_MS = 10_000;
export const WEBHOOK_DEFAULT_SIGNATURE_HEADER = 'X-Outbox-Signature';

// setTimeout overflows to "fire at once" above this.
const MAX_TIMEOUT_MS = 2_147_483_647;
// Enough bytes for 200 characters of any script; the rest of an error body is not worth waiting for.
const ERROR_BODY_BYTES = 1024;
const ERROR_BODY_CHARS = 200;
// A success body is read so the connection can be reused, but a receiver streaming megabytes back
// should not hold the send open: past this the request is cancelled instead.
const SUCCESS_BODY_BYTES = 64 * 1024;

/**
 * Posts each message as JSON to an HTTP endpoint.
 *
 * Request: `POST <url>` with a {@link WebhookEnvelope} body and the headers `Content-Type:
 * application/json`, `Idempotency-Key: <event id>` (the same on every attempt: receivers drop
 * duplicates by it), `X-Outbox-Topic`, `X-Outbox-Attempt`, `X-Outbox-Key` (when the event has a key),
 * the configured static headers, and with a `secret` the signature header.
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
    if (typeof name !== 'string' || name.trim() === '') {
      throw new OutboxConfigurationError('transports', `a WebhookTransport needs a non-empty name, got ${describeValue(name)}`);
    }
    const at = (option: string) => `transports.${name}.${option}`;
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new OutboxConfigurationError(`transports.${name}`, `expected an options object, got ${describeValue(options)}`);
    }
    rejectUnknownOptions(`transports.${name}`, options, OPTION_KEYS);

    if (options.url !== undefined) {
      const parsed = parseWebhookUrl(options.url);
      if (typeof parsed === 'string') throw new OutboxConfigurationError(at('url'), parsed);
      this.url = parsed;
    }

    this.timeoutMs = integerOption(at('timeoutMs'), options.timeoutMs, WEBHOOK_DEFAULT_TIMEOUT_MS, 1, MAX_TIMEOUT_MS);

    if (options.secret !== undefined && (typeof options.secret !== 'string' || options.secret === '')) {
      // Only the type is shown: the value is a secret.
      const got = options.secret === '' ? 'an empty string' : `a ${typeof options.secret}`;
      throw new OutboxConfigurationError(
        at('secret'),
        `expected a non-empty string, got ${got}; leave it out to send unsigned requests`,
      );
    }
    this.secret = options.secret;

    if (options.signatureHeader !== undefined) {
      if (typeof options.signatureHeader !== 'string' || !isHeaderName(options.signatureHeader)) {
        throw new OutboxConfigurationError(
          at('signatureHeader'),
          `expected a header name (letters, digits and !#$%&'*+-.^_\`|~), got ${describeValue(options.signatureHeader)}`,
        );
      }
      // Most likely the secret came from an unset environment variable: better to stop than to send
      // unsigned requests the receiver was told to expect signed.
      if (this.secret === undefined) {
        throw new OutboxConfigurationError(
          at('secret'),
          'signatureHeader is set but secret is missing; requests would go out unsigned',
        );
      }
    }
    this.signatureHeader = options.signatureHeader ?? WEBHOOK_DEFAULT_SIGNATURE_HEADER;

    this.staticHeaders = validateStaticHeaders(at('headers'), options.headers, this.signatureHeader);

    if (options.fetch !== undefined && typeof options.fetch !== 'function') {
      throw new OutboxConfigurationError(at('fetch'), `expected a fetch function, got ${describeValue(options.fetch)}`);
    }
    if (options.fetch === undefined && typeof globalThis.fetch !== 'function') {
      throw new OutboxConfigurationError(at('fetch'), 'this runtime has no global fetch; pass one (Node 20+ has it)');
    }
    // Bound so the global fetch is not called with the transport as `this` (it throws "Illegal invocation").
    this.fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
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
      await this.judge(response, url, where);
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

  private async judge(response: Response, url: URL, where: string): Promise<void> {
    const status = response.status;
    if (status >= 200 && status < 300) {
      // The receiver accepted the event; a body that fails mid-way does not change that.
      await readBody(response, SUCCESS_BODY_BYTES).catch(() => undefined);
      return;
    }
    const answered = `webhook ${where} answered ${status}${STATUS_CODES[status] ? ` ${STATUS_CODES[status]}` : ''}`;

    if ((status >= 300 && status < 400) || response.type === 'opaqueredirect') {
      const location = redactedLocation(response.headers.get('location'), url);
      await cancelBody(response);
      throw new OutboxNonRetryableError(
        `${answered}${location ? ` (to ${location})` : ''}; redirects are not followed, since they would ` +
          'resend the signed event to another address (or turn the POST into a GET): configure the final URL',
      );
    }

    const snippet = await errorSnippet(response);
    const detail = snippet ? `; response body: ${JSON.stringify(snippet)}` : '';

    if (status === 408 || status === 429 || (status >= 500 && status < 600)) {
      const delay = retryAfterMs(response.headers.get('retry-after'), response.headers.get('date'));
      if (delay !== undefined) {
        throw new OutboxRetryLaterError(`${answered}, retry after ${Math.ceil(delay / 1000)} s${detail}`, delay);
      }
      throw new Error(`${answered}${detail}`);
    }
    if (status >= 400 && status < 500) {
      throw new OutboxNonRetryableError(
        `${answered}; not retrying, a 4xx other than 408 and 429 means the receiver refuses this request${detail}`,
      );
    }
    // Not a status a server should send; assume a confused proxy and try again later.
    throw new Error(`${answered}${detail}`);
  }
}

const OPTION_KEYS = ['url', 'timeoutMs', 'headers', 'secret', 'signatureHeader', 'fetch'];

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
function signWebhookBody(body: string, secret: string, nowMs = Date.now()): string {
  const t = Math.floor(nowMs / 1000).toString();
  return `t=${t},v1=${hmac(secret, t, body).toString('hex')}`;
}

function hmac(secret: string, timestamp: string, body: string | Uint8Array): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`, 'utf8').update(body).digest();
}

/**
 * Checks a signature header sent by {@link WebhookTransport}: `t=<unix seconds>,v1=<hex>`. `body` must
 * be the raw request body as received (re-serialising parsed JSON changes the bytes). Returns false
 * when the header is malformed, the timestamp is more than `toleranceSeconds` away from `now` (in
 * either direction, allowing for clock skew), or no `v1` value matches. Several `v1` values are
 * accepted so a sender can sign with an old and a new secret while they are rotated.
 */
export function verifyWebhookSignature(
  body: string | Uint8Array,
  header: string,
  secret: string,
  toleranceSeconds = 300,
  now: number = Date.now(),
): boolean {
  if (typeof header !== 'string' || typeof secret !== 'string' || secret === '') return false;
  let timestamp: string | undefined;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't') {
      // Two timestamps make it ambiguous which one the signature covers.
      if (timestamp !== undefined) return false;
      timestamp = value;
    } else if (name === 'v1') {
      candidates.push(value);
    }
  }
  if (timestamp === undefined || !/^\d{1,12}$/.test(timestamp)) return false;
  if (!(Math.abs(now / 1000 - Number(timestamp)) <= toleranceSeconds)) return false;
  const expected = hmac(secret, timestamp, body);
  let matched = false;
  for (const candidate of candidates) {
    if (!/^[0-9a-fA-F]{64}$/.test(candidate)) continue;
    // No early exit: the time taken must not tell which candidate matched.
    if (timingSafeEqual(Buffer.from(candidate, 'hex'), expected)) matched = true;
  }
  return matched;
}

/** The URL, or why it is not usable. */
function parseWebhookUrl(value: unknown): URL | string {
  if (typeof value !== 'string' || value.trim() === '') {
    return `expected an http:// or https:// URL, got ${describeValue(value)}`;
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    // The value is not echoed: a malformed URL may still carry a token.
    return 'expected an absolute http:// or https:// URL, got a string that does not parse as one';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `expected an http:// or https:// URL, got the scheme "${url.protocol}"`;
  }
  // fetch() refuses such URLs, and its error message would repeat the password.
  if (url.username !== '' || url.password !== '') {
    return 'the URL contains user:password@ credentials, which fetch() refuses; send them in headers.Authorization';
  }
  return url;
}

function validateStaticHeaders(option: string, value: unknown, signatureHeader: string): Record<string, string> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new OutboxConfigurationError(option, `expected an object of string values, got ${describeValue(value)}`);
  }
  const reserved = new Set([...RESERVED_HEADERS, signatureHeader.toLowerCase()]);
  const headers: Record<string, string> = {};
  for (const [name, headerValue] of Object.entries(value)) {
    if (!isHeaderName(name)) {
      throw new OutboxConfigurationError(option, `"${name}" is not a valid header name`);
    }
    if (reserved.has(name.toLowerCase())) {
      throw new OutboxConfigurationError(
        option,
        `header "${name}" is set by the webhook transport itself and cannot be overridden`,
      );
    }
    // Checked now, or fetch() would throw on every send and the events would be retried for nothing.
    if (typeof headerValue !== 'string' || /[\0\r\n]/.test(headerValue)) {
      throw new OutboxConfigurationError(
        option,
        // Only the type is shown: header values are often credentials.
        `header "${name}" must be a string without NUL, CR or LF, got ` +
          (typeof headerValue === 'string'
            ? 'a string with one'
            : headerValue === undefined
              ? 'undefined (an unset environment variable?)'
              : headerValue === null
                ? 'null'
                : `a ${typeof headerValue}`),
      );
    }
    headers[name] = headerValue;
  }
  return headers;
}

const RESERVED_HEADERS = [
  'content-type',
  'content-length',
  'transfer-encoding',
  'host',
  'connection',
  'idempotency-key',
  'x-outbox-topic',
  'x-outbox-attempt',
  'x-outbox-key',
];

function isHeaderName(name: string): boolean {
  return /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name);
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

/**
 * Milliseconds to wait from a `Retry-After` value: delay-seconds, or an HTTP-date. A date is taken
 * relative to the response's own `Date` header when there is one, so a skewed clock on either side
 * does not stretch or cut the wait.
 */
function retryAfterMs(value: string | null, dateHeader: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Math.min(Number(trimmed), MAX_TIMEOUT_MS) * 1000;
  const at = parseHttpDate(trimmed);
  if (at === undefined) return undefined;
  const reference = (dateHeader !== null ? parseHttpDate(dateHeader.trim()) : undefined) ?? now;
  return Math.max(0, at - reference);
}

function parseHttpDate(value: string): number | undefined {
  // All three HTTP-date forms start with a day name; without this check Date.parse() would read
  // something like "1.5" as a calendar date.
  if (!/^[A-Za-z]{3,9},? /.test(value)) return undefined;
  // The asctime form has no zone, and HTTP dates are always GMT.
  const ms = Date.parse(/GMT$/i.test(value) ? value : `${value} GMT`);
  return Number.isNaN(ms) ? undefined : ms;
}

/** Origin and path of a redirect target; its query string may hold tokens. */
function redactedLocation(location: string | null, base: URL): string | undefined {
  if (!location) return undefined;
  try {
    const target = new URL(location, base);
    return `${target.origin}${target.pathname}`;
  } catch {
    return undefined;
  }
}

/** Reads up to `maxBytes` of the body and cancels the rest, so the socket is either reused or closed. */
async function readBody(response: Response, maxBytes: number): Promise<Buffer> {
  const body = response.body;
  if (!body) return Buffer.alloc(0);
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < maxBytes) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks);
}

async function cancelBody(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/** The first 200 characters of an error response, on one line; empty when unreadable. */
async function errorSnippet(response: Response): Promise<string> {
  let bytes: Buffer;
  try {
    bytes = await readBody(response, ERROR_BODY_BYTES);
  } catch {
    return '';
  }
  const text = bytes.toString('utf8').replace(/\s+/g, ' ').trim();
  return Array.from(text).slice(0, ERROR_BODY_CHARS).join('');
}
