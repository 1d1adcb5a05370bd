import { OutboxValidationError } from '../errors/outbox.errors';
import type { OutboxEventFilter, OutboxPageRequest, OutboxSelection } from '../interfaces/outbox-operations.interface';
import { describeValue } from '../utils/describe-value';
import { isPlainObject } from '../utils/option-checks';

/**
 * The admin API's input as it arrives — query strings and JSON bodies — turned into the operations'
 * arguments. Only the shape is checked here (known fields, one value each, times); the values are checked
 * by `OutboxOperations`, as they are for any caller, so both refuse the same input with the same message.
 */

const TIMES = ['createdAfter', 'createdBefore', 'processedAfter', 'processedBefore'] as const;
const LISTS = ['status', 'id'] as const;
const TEXTS = ['topic', 'key', 'dedupeKey', 'errorContains'] as const;
export const FILTER_FIELDS: readonly string[] = [...LISTS, ...TEXTS, ...TIMES];
const PAGE_FIELDS = ['limit', 'cursor', 'order'];

type Query = Record<string, unknown>;

function refuse(field: string, problem: string): never {
  throw new OutboxValidationError(field, problem);
}

function knownOnly(where: string, value: Record<string, unknown>, allowed: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) refuse(where, `unknown field "${key}" (expected ${allowed.join(', ')})`);
  }
}

/** A query parameter given once, as text. */
function single(query: Query, name: string): string | undefined {
  const value = query[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') refuse(name, 'give it once, as text');
  return value;
}

/** A time given as ISO-8601 text. */
function time(field: string, value: unknown): Date {
  if (typeof value !== 'string' || !/^\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(value)) {
    refuse(`filter.${field}`, `expected an ISO-8601 time such as 2026-12-05T10:00:00Z, got ${describeValue(value)}`);
  }
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) refuse(`filter.${field}`, `not a time: ${describeValue(value)}`);
  return date;
}

/** A filter from a query string: lists comma-separated, times as ISO-8601. Other parameters may be `extra`. */
export function filterFromQuery(query: Query, extra: readonly string[] = []): OutboxEventFilter {
  knownOnly('query', query, [...FILTER_FIELDS, ...extra]);
  const filter: Record<string, unknown> = {};
  for (const name of LISTS) {
    const value = single(query, name);
    if (value === undefined) continue;
    const list = value.split(',').filter((part) => part !== '');
    filter[name] = list.length === 1 ? list[0] : list;
  }
  for (const name of TEXTS) {
    const value = single(query, name);
    if (value !== undefined) filter[name] = value;
  }
  for (const name of TIMES) {
    const value = single(query, name);
    if (value !== undefined) filter[name] = time(name, value);
  }
  return filter;
}

/** A page request from a query string: `limit`, `cursor`, `order`. */
export function pageFromQuery(query: Query): OutboxPageRequest {
  const page: OutboxPageRequest = {};
  const limit = single(query, 'limit');
  if (limit !== undefined) {
    if (!/^\d{1,4}$/.test(limit)) refuse('page.limit', `expected a whole number, got ${describeValue(limit)}`);
    page.limit = Number(limit);
  }
  const cursor = single(query, 'cursor');
  if (cursor !== undefined) page.cursor = cursor;
  const order = single(query, 'order');
  if (order !== undefined) page.order = order as OutboxPageRequest['order'];
  return page;
}

/** The events list's query: a filter and a page. */
export function eventsQuery(query: Query): { filter: OutboxEventFilter; page: OutboxPageRequest } {
  return { filter: filterFromQuery(query, PAGE_FIELDS), page: pageFromQuery(query) };
}

/** A whole number from `min` to `max` in a query parameter, or `fallback`. */
export function limitFromQuery(query: Query, allowed: readonly string[], fallback: number, max: number): number {
  knownOnly('query', query, allowed);
  const value = single(query, 'limit');
  if (value === undefined) return fallback;
  const n = /^\d{1,4}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= max)) refuse('limit', `expected a whole number from 1 to ${max}, got ${describeValue(value)}`);
  return n;
}

/** A filter given as JSON: the operations' fields, times as ISO-8601 text. */
function filterFromJson(value: unknown): OutboxEventFilter {
  if (!isPlainObject(value)) refuse('selection.filter', `expected an object, got ${describeValue(value)}`);
  knownOnly('selection.filter', value, FILTER_FIELDS);
  const filter: Record<string, unknown> = { ...value };
  for (const name of TIMES) if (value[name] !== undefined) filter[name] = time(name, value[name]);
  return filter;
}

/** A mutation's body: `{ selection, dryRun?, resetAttempts? }` (`resetAttempts` for a redrive only). */
export function mutationBody(
  body: unknown,
  options: readonly string[],
): { selection: OutboxSelection; options: Record<string, boolean> } {
  if (!isPlainObject(body)) {
    refuse('body', `expected a JSON object { selection, dryRun? }, got ${describeValue(body)}`);
  }
  knownOnly('body', body, ['selection', ...options]);
  const selection = body.selection;
  if (!isPlainObject(selection)) {
    refuse('selection', 'expected { ids: [...] }, { filter: {...} } or { group: { topic, fingerprint } }');
  }
  const kinds = Object.keys(selection);
  if (kinds.length !== 1 || !['ids', 'filter', 'group'].includes(kinds[0])) {
    refuse('selection', `expected exactly one of ids, filter or group, got ${kinds.join(', ') || 'none'}`);
  }
  const chosen: OutboxSelection =
    kinds[0] === 'filter' ? { filter: filterFromJson(selection.filter) } : (selection as OutboxSelection);
  const given: Record<string, boolean> = {};
  for (const name of options) {
    const value = body[name];
    if (value === undefined) continue;
    if (typeof value !== 'boolean') refuse(name, `expected true or false, got ${describeValue(value)}`);
    given[name] = value;
  }
  return { selection: chosen, options: given };
}
