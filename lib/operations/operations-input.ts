import { OutboxValidationError } from '../errors/outbox.errors';
import type {
  OutboxEventFilter,
  OutboxEventState,
  OutboxPageRequest,
  OutboxSelection,
} from '../interfaces/outbox-operations.interface';
import { quoteValue } from '../utils/describe-value';
import { booleanOption, isPlainObject, knownKeys, type KnownKeysRule } from '../utils/option-checks';
import { validateTopic, validateTopicPattern } from '../utils/topic';

export const PAGE_LIMIT = { default: 50, max: 500 };
/** The most ids one filter or selection may list. */
export const MAX_IDS = 1000;

const STATES: readonly OutboxEventState[] = ['due', 'scheduled', 'in_flight', 'waiting', 'delivered', 'dead'];
/** Every field of a filter, once: a field added to `OutboxEventFilter` and not here fails to compile. */
const FILTER_FIELDS: Record<keyof OutboxEventFilter, true> = {
  status: true,
  topic: true,
  key: true,
  id: true,
  dedupeKey: true,
  errorContains: true,
  createdAfter: true,
  createdBefore: true,
  processedAfter: true,
  processedBefore: true,
};
const FILTER_KEYS = Object.keys(FILTER_FIELDS);
const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const PRINTABLE = /^[\x20-\x7e]{1,255}$/;
/** The longest text a filter compares with. */
const MAX_TEXT = 255;
/** The times all three databases store: PostgreSQL refuses the statement beyond them, the others match nothing. */
const EARLIEST = Date.parse('0001-01-01T00:00:00.000Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');
const FINGERPRINT = /^[0-9a-f]{16}$/;

/** A filter checked and normalised: what the statement builder turns into conditions. */
export interface EventQuery extends Omit<OutboxEventFilter, 'status' | 'topic' | 'id'> {
  states?: OutboxEventState[];
  /** An exact topic, or a pattern the rows' topics must match (a LIKE narrows the scan first). */
  topic?: { exact: string } | { pattern: string };
  ids?: string[];
}

/** An argument of an operation: a plain object with known fields. */
const ARGUMENT: KnownKeysRule = {
  isObject: isPlainObject,
  wrongValue: (field, expected, value) =>
    new OutboxValidationError(field, `expected ${expected}, got ${quoteValue(value)}`),
  unknownKey: (field, key, allowed) =>
    new OutboxValidationError(field, `unknown field "${key}"; allowed: ${allowed.join(', ')}`),
};

function text(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !PRINTABLE.test(value)) {
    throw new OutboxValidationError(field, `expected 1 to 255 printable ASCII characters, got ${quoteValue(value)}`);
  }
  return value;
}

/**
 * Error texts are in any language, so any text is searched for, except what PostgreSQL cannot store or
 * compare: NUL, and half of a surrogate pair (no character at all; drivers send U+FFFD in its place).
 */
function searchText(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0 || [...value].length > MAX_TEXT) {
    throw new OutboxValidationError(field, `expected text of 1 to ${MAX_TEXT} characters, got ${quoteValue(value)}`);
  }
  const unstorable = value.includes('\0')
    ? 'a NUL character (U+0000)'
    : /\p{Cs}/u.test(value)
      ? 'a lone UTF-16 surrogate (half of a character)'
      : undefined;
  if (unstorable) {
    throw new OutboxValidationError(
      field,
      `it contains ${unstorable}, which PostgreSQL cannot store or compare: remove it`,
    );
  }
  return value;
}

function time(field: string, value: unknown): Date | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new OutboxValidationError(field, `expected a valid Date, got ${quoteValue(value)}`);
  }
  if (value.getTime() < EARLIEST || value.getTime() > LATEST) {
    throw new OutboxValidationError(
      field,
      `expected a Date from 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z (what every supported database stores), ` +
        `got ${value.toISOString()}`,
    );
  }
  return value;
}

/** Event ids as the table stores them (lower-case UUIDs); anything else could match nothing, or fail in SQL. */
export function validateIds(field: string, value: unknown): string[] {
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0 || list.length > MAX_IDS) {
    throw new OutboxValidationError(field, `expected 1 to ${MAX_IDS} event ids, got ${list.length}`);
  }
  for (const id of list) {
    if (typeof id !== 'string' || !ID.test(id.toLowerCase())) {
      throw new OutboxValidationError(field, `expected event ids (UUIDs), got ${quoteValue(id)}`);
    }
  }
  return [...new Set(list.map((id: string) => id.toLowerCase()))];
}

function states(value: unknown): OutboxEventState[] | undefined {
  if (value === undefined) return undefined;
  const list: unknown[] = Array.isArray(value) ? value : [value];
  if (list.length === 0)
    throw new OutboxValidationError('filter.status', 'expected a state or a non-empty list of states');
  const result = new Set<OutboxEventState>();
  for (const state of list) {
    if (state === 'pending') {
      result.add('due');
      result.add('scheduled');
    } else if (STATES.includes(state as OutboxEventState)) result.add(state as OutboxEventState);
    else {
      throw new OutboxValidationError(
        'filter.status',
        `expected one of pending, ${STATES.join(', ')}, got ${quoteValue(state)}`,
      );
    }
  }
  return [...result];
}

function topic(value: unknown): EventQuery['topic'] {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && !/[*#]/.test(value)) return { exact: validateTopic(value) };
  const problem = validateTopicPattern(value);
  if (problem) throw new OutboxValidationError('filter.topic', problem);
  return { pattern: value as string };
}

export function validateFilter(value: unknown, field = 'filter'): EventQuery {
  const f = knownKeys(field, value, FILTER_KEYS, ARGUMENT) as OutboxEventFilter;
  const query: EventQuery = {
    states: states(f.status),
    topic: topic(f.topic),
    key: text(`${field}.key`, f.key),
    ids: f.id === undefined ? undefined : validateIds(`${field}.id`, f.id),
    dedupeKey: text(`${field}.dedupeKey`, f.dedupeKey),
    errorContains: searchText(`${field}.errorContains`, f.errorContains),
    createdAfter: time(`${field}.createdAfter`, f.createdAfter),
    createdBefore: time(`${field}.createdBefore`, f.createdBefore),
    processedAfter: time(`${field}.processedAfter`, f.processedAfter),
    processedBefore: time(`${field}.processedBefore`, f.processedBefore),
  };
  for (const key of Object.keys(query) as Array<keyof EventQuery>) if (query[key] === undefined) delete query[key];
  return query;
}

/** A page request checked, its cursor opened. */
export interface PageQuery {
  limit: number;
  newestFirst: boolean;
  /** Resume after this id, in the page's order. */
  after?: string;
}

/** The cursor is opaque to callers: the order and the last id of a page, so it cannot be used with another order. */
function cursorOf(newestFirst: boolean, id: string): string {
  return Buffer.from(JSON.stringify({ o: newestFirst ? 'n' : 'o', id })).toString('base64url');
}

export function nextCursor(page: PageQuery, lastId: string): string {
  return cursorOf(page.newestFirst, lastId);
}

export function validatePage(value: unknown): PageQuery {
  const p = knownKeys('page', value, ['limit', 'cursor', 'order'], ARGUMENT) as OutboxPageRequest;
  const limit = p.limit ?? PAGE_LIMIT.default;
  if (!Number.isInteger(limit) || limit < 1 || limit > PAGE_LIMIT.max) {
    throw new OutboxValidationError(
      'page.limit',
      `expected a whole number from 1 to ${PAGE_LIMIT.max}, got ${quoteValue(limit)}`,
    );
  }
  if (p.order !== undefined && p.order !== 'newest' && p.order !== 'oldest') {
    throw new OutboxValidationError('page.order', `expected "newest" or "oldest", got ${quoteValue(p.order)}`);
  }
  const newestFirst = p.order !== 'oldest';
  if (p.cursor === undefined) return { limit, newestFirst };
  let opened: { o?: unknown; id?: unknown } | undefined;
  try {
    opened =
      typeof p.cursor === 'string'
        ? (JSON.parse(Buffer.from(p.cursor, 'base64url').toString('utf8')) as typeof opened)
        : undefined;
  } catch {
    opened = undefined;
  }
  const id = typeof opened?.id === 'string' && ID.test(opened.id) ? opened.id : undefined;
  if (!id || (opened?.o !== 'n' && opened?.o !== 'o')) {
    throw new OutboxValidationError(
      'page.cursor',
      `expected the nextCursor of an earlier page, got ${quoteValue(p.cursor)}`,
    );
  }
  if ((opened.o === 'n') !== newestFirst) {
    throw new OutboxValidationError(
      'page.cursor',
      `the cursor belongs to a page in the other order; pass the same order`,
    );
  }
  return { limit, newestFirst, after: id };
}

/** A selection checked: listed ids, a filter, or a failure group. */
export type SelectionQuery =
  { ids: string[] } | { filter: EventQuery } | { group: { topic: string; fingerprint: string } };

export function validateSelection(value: unknown): SelectionQuery {
  const s = knownKeys('selection', value, ['ids', 'filter', 'group'], ARGUMENT) as Partial<
    Record<'ids' | 'filter' | 'group', unknown>
  >;
  const given = (['ids', 'filter', 'group'] as const).filter((key) => s[key] !== undefined);
  if (given.length !== 1) {
    throw new OutboxValidationError(
      'selection',
      `expected exactly one of ids, filter or group, got ${given.join(', ') || 'none'}`,
    );
  }
  if (s.ids !== undefined) return { ids: validateIds('selection.ids', s.ids) };
  if (s.filter !== undefined) return { filter: validateFilter(s.filter, 'selection.filter') };
  const g = knownKeys('selection.group', s.group, ['topic', 'fingerprint'], ARGUMENT) as OutboxSelection & {
    topic?: unknown;
    fingerprint?: unknown;
  };
  const fingerprint = g.fingerprint;
  if (typeof fingerprint !== 'string' || !FINGERPRINT.test(fingerprint)) {
    throw new OutboxValidationError(
      'selection.group.fingerprint',
      `expected the fingerprint of a failure group, got ${quoteValue(fingerprint)}`,
    );
  }
  return { group: { topic: validateTopic(g.topic), fingerprint } };
}

/** An operation's `true` or `false` option, or `fallback` when not given. */
export function booleanArgument(field: string, value: unknown, fallback: boolean): boolean {
  return booleanOption(field, value, fallback, ARGUMENT);
}

/** Options of redrive, discard or deliverNow, checked. */
export function validateOperationOptions(value: unknown, allowed: readonly string[]): Record<string, unknown> {
  return knownKeys('options', value, allowed, ARGUMENT);
}

/** `blockedKeys()`'s options: how many keys at most (as a page's limit). */
export function validateBlockedKeysOptions(value: unknown): number {
  const limit = validateOperationOptions(value, ['limit']).limit ?? PAGE_LIMIT.default;
  if (!Number.isInteger(limit) || (limit as number) < 1 || (limit as number) > PAGE_LIMIT.max) {
    throw new OutboxValidationError(
      'options.limit',
      `expected a whole number from 1 to ${PAGE_LIMIT.max}, got ${quoteValue(limit)}`,
    );
  }
  return limit as number;
}
