import { STATUS_CODES } from 'node:http';
import { OutboxNonRetryableError, OutboxRetryLaterError } from '../../errors/outbox.errors';
import { MAX_TIMEOUT_MS } from './webhook-options';

// Enough bytes for 200 characters of any script; the rest of an error body is not worth waiting for.
const ERROR_BODY_BYTES = 1024;
const ERROR_BODY_CHARS = 200;
// A success body is read so the connection can be reused, but a receiver streaming megabytes back
// should not hold the send open: past this the request is cancelled instead.
const SUCCESS_BODY_BYTES = 64 * 1024;

/**
 * What an answer means for the event: returns on 2xx; throws a retryable error (with the `Retry-After`
 * delay when given) on 408, 429 and 5xx, a non-retryable one on other 4xx and on redirects.
 */
export async function judgeResponse(response: Response, url: URL, where: string): Promise<void> {
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
  const reader = (body as ReadableStream<Uint8Array>).getReader();
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
