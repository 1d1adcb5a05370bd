import { OutboxHeadersTooLargeError, OutboxPayloadTooLargeError, OutboxValidationError } from '../errors/outbox.errors';
import type { PublishManyItem } from '../interfaces/outbox-message.interface';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { quoteValue } from '../utils/describe-value';
import { validateTopic } from '../utils/topic';

const KEY = /^[\x20-\x7e]{1,255}$/;
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$/;
// eslint-disable-next-line no-control-regex
const HEADER_VALUE = /^[^\x00-\x08\x0a-\x1f\x7f]{0,4096}$/;
// An escaped NUL that is not itself an escaped backslash followed by "u0000".
const ESCAPED_NUL = /(^|[^\\])(\\\\)*\\u0000/;
// JSON.stringify writes a paired surrogate as the character itself and a lone one as an escape
// (lower-case hex); the same care for escaped backslashes as above.
const ESCAPED_LONE_SURROGATE = /(^|[^\\])(\\\\)*\\u(d[89a-f][0-9a-f]{2})/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/**
 * The serialised headers must fit every backend's column: MariaDB/MySQL keep them in a `text` of
 * 65,535 bytes, which the per-header limits alone would overflow (and, without a strict `sql_mode`,
 * truncate silently). A quarter of it leaves room and is still far more than headers need.
 */
export const MAX_HEADERS_BYTES = 16 * 1024;
const LONE_SURROGATE_HINT =
  'a lone UTF-16 surrogate (a string cut in the middle of a character such as an emoji), which is not ' +
  'valid Unicode text and which PostgreSQL refuses; cut strings at code points (Array.from(text)) or encode the data (base64)';
const MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000;

function validateKey(field: 'key' | 'dedupeKey', value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || !KEY.test(value)) {
    throw new OutboxValidationError(field, `expected 1 to 255 printable ASCII characters, got ${quoteValue(value)}`);
  }
  return value;
}

function serialisePayload(payload: unknown, maxBytes: number): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(payload);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new OutboxValidationError(
      'payload',
      `it is not JSON-serialisable (${reason}); convert BigInt to string and remove circular references`,
    );
  }
  if (json === undefined) {
    throw new OutboxValidationError(
      'payload',
      `expected a JSON value (object, array, string, number, boolean or null), got ${typeof payload}`,
    );
  }
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) throw new OutboxPayloadTooLargeError(bytes, maxBytes);
  if (ESCAPED_NUL.test(json)) {
    throw new OutboxValidationError(
      'payload',
      'it contains the character U+0000, which PostgreSQL JSON cannot store; remove it or encode the data (base64)',
    );
  }
  const surrogate = ESCAPED_LONE_SURROGATE.exec(json);
  if (surrogate) {
    throw new OutboxValidationError('payload', `it contains \\u${surrogate[3]}, ${LONE_SURROGATE_HINT}`);
  }
  return json;
}

function validateHeaders(headers: unknown): Record<string, string> {
  if (headers === undefined || headers === null) return {};
  if (typeof headers !== 'object' || Array.isArray(headers)) {
    throw new OutboxValidationError('headers', `expected an object of string values, got ${quoteValue(headers)}`);
  }
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!HEADER_NAME.test(name)) {
      throw new OutboxValidationError(
        'headers',
        `header name ${quoteValue(name)} must be 1 to 128 characters valid in an HTTP header name`,
      );
    }
    if (typeof value !== 'string' || !HEADER_VALUE.test(value)) {
      throw new OutboxValidationError(
        'headers',
        `header "${name}" must be a string of at most 4096 characters without control characters, got ${quoteValue(value)}`,
      );
    }
    const surrogate = LONE_SURROGATE.exec(value);
    if (surrogate) {
      const unit = surrogate[0].charCodeAt(0).toString(16);
      throw new OutboxValidationError('headers', `header "${name}" contains \\u${unit}, ${LONE_SURROGATE_HINT}`);
    }
    out[name] = value;
  }
  return out;
}

function serialiseHeaders(headers: Record<string, string>): string {
  const json = JSON.stringify(headers);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > MAX_HEADERS_BYTES) throw new OutboxHeadersTooLargeError(bytes, MAX_HEADERS_BYTES);
  return json;
}

function validateSchedule(delayMs: unknown, availableAt: unknown): { delayMs: number; availableAt: Date | null } {
  if (delayMs !== undefined && availableAt !== undefined) {
    throw new OutboxValidationError('delayMs', 'give either delayMs or availableAt, not both');
  }
  if (availableAt !== undefined) {
    if (!(availableAt instanceof Date) || Number.isNaN(availableAt.getTime())) {
      throw new OutboxValidationError('availableAt', `expected a valid Date, got ${quoteValue(availableAt)}`);
    }
    return { delayMs: 0, availableAt };
  }
  if (delayMs === undefined) return { delayMs: 0, availableAt: null };
  if (typeof delayMs !== 'number' || !Number.isInteger(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
    throw new OutboxValidationError(
      'delayMs',
      `expected a whole number of milliseconds from 0 to ${MAX_DELAY_MS}, got ${quoteValue(delayMs)}`,
    );
  }
  return { delayMs, availableAt: null };
}

export function validateEvent(
  item: PublishManyItem,
  maxPayloadBytes: number,
  /** The publisher's trace context, JSON (see `OutboxTracer.publish`): stored beside the headers, never in them. */
  traceContextJson: string | null = null,
): ValidatedEvent {
  const topic = validateTopic(item.topic);
  const key = validateKey('key', item.key);
  const dedupeKey = validateKey('dedupeKey', item.dedupeKey);
  const payloadJson = serialisePayload(item.payload, maxPayloadBytes);
  const headers = validateHeaders(item.headers);
  const schedule = validateSchedule(item.delayMs, item.availableAt);
  return {
    topic,
    key,
    dedupeKey,
    payloadJson,
    headers,
    headersJson: serialiseHeaders(headers),
    traceContextJson,
    ...schedule,
  };
}
