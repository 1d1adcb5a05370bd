/**
 * A configuration value for an error message: its type and, for a primitive, the value. Secrets are
 * never passed here; callers show only the type of those.
 */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return `the string "${value}"`;
  if (typeof value === 'number' && Number.isNaN(value)) return 'NaN';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return `${typeof value} ${value}`;
  // undefined, or a symbol
  return typeof value === 'symbol' ? `symbol ${value.toString()}` : 'undefined undefined';
}

/** A value from a published event for an error message: strings quoted and cut at 60 characters. */
export function quoteValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  return String(value);
}
