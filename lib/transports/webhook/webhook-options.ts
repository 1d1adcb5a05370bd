import { OutboxConfigurationError } from '../../errors/outbox.errors';
import { describeValue } from '../../utils/describe-value';
import { integerOption, rejectUnknownOptions } from '../../utils/option-checks';

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

export const WEBHOOK_DEFAULT_TIMEOUT_MS = 10_000;
export const WEBHOOK_DEFAULT_SIGNATURE_HEADER = 'X-Outbox-Signature';

// setTimeout overflows to "fire at once" above this.
export const MAX_TIMEOUT_MS = 2_147_483_647;

const OPTION_KEYS = ['url', 'timeoutMs', 'headers', 'secret', 'signatureHeader', 'fetch'];

/** A webhook transport's options, checked once at construction. */
export interface ResolvedWebhookOptions {
  url: URL | undefined;
  timeoutMs: number;
  staticHeaders: Record<string, string>;
  secret: string | undefined;
  signatureHeader: string;
  fetchFn: typeof fetch;
}

/** Checks `options` of the transport `name`; a wrong one stops the app at start-up, not at the first send. */
export function resolveWebhookOptions(name: string, options: WebhookTransportOptions): ResolvedWebhookOptions {
  if (typeof name !== 'string' || name.trim() === '') {
    throw new OutboxConfigurationError(
      'transports',
      `a WebhookTransport needs a non-empty name, got ${describeValue(name)}`,
    );
  }
  const at = (option: string) => `transports.${name}.${option}`;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new OutboxConfigurationError(
      `transports.${name}`,
      `expected an options object, got ${describeValue(options)}`,
    );
  }
  rejectUnknownOptions(`transports.${name}`, options, OPTION_KEYS);

  let url: URL | undefined;
  if (options.url !== undefined) {
    const parsed = parseWebhookUrl(options.url);
    if (typeof parsed === 'string') throw new OutboxConfigurationError(at('url'), parsed);
    url = parsed;
  }

  const timeoutMs = integerOption(at('timeoutMs'), options.timeoutMs, WEBHOOK_DEFAULT_TIMEOUT_MS, 1, MAX_TIMEOUT_MS);

  if (options.secret !== undefined && (typeof options.secret !== 'string' || options.secret === '')) {
    // Only the type is shown: the value is a secret.
    const got = options.secret === '' ? 'an empty string' : `a ${typeof options.secret}`;
    throw new OutboxConfigurationError(
      at('secret'),
      `expected a non-empty string, got ${got}; leave it out to send unsigned requests`,
    );
  }
  const secret = options.secret;

  if (options.signatureHeader !== undefined) {
    if (typeof options.signatureHeader !== 'string' || !isHeaderName(options.signatureHeader)) {
      throw new OutboxConfigurationError(
        at('signatureHeader'),
        `expected a header name (letters, digits and !#$%&'*+-.^_\`|~), got ${describeValue(options.signatureHeader)}`,
      );
    }
    // Most likely the secret came from an unset environment variable: better to stop than to send
    // unsigned requests the receiver was told to expect signed.
    if (secret === undefined) {
      throw new OutboxConfigurationError(
        at('secret'),
        'signatureHeader is set but secret is missing; requests would go out unsigned',
      );
    }
  }
  const signatureHeader = options.signatureHeader ?? WEBHOOK_DEFAULT_SIGNATURE_HEADER;

  const staticHeaders = validateStaticHeaders(at('headers'), options.headers, signatureHeader);

  if (options.fetch !== undefined && typeof options.fetch !== 'function') {
    throw new OutboxConfigurationError(at('fetch'), `expected a fetch function, got ${describeValue(options.fetch)}`);
  }
  if (options.fetch === undefined && typeof globalThis.fetch !== 'function') {
    throw new OutboxConfigurationError(at('fetch'), 'this runtime has no global fetch; pass one (Node 20+ has it)');
  }
  // Bound so the global fetch is not called with the transport as `this` (it throws "Illegal invocation").
  const fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
  return { url, timeoutMs, staticHeaders, secret, signatureHeader, fetchFn };
}

/** The URL, or why it is not usable. */
export function parseWebhookUrl(value: unknown): URL | string {
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
