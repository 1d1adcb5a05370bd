import { OutboxConfigurationError } from '../errors/outbox.errors';
import { describeValue } from './describe-value';

/** The first key of `value` that `allowed` does not list (a typo, most often), or undefined. */
export function unknownKey(value: object, allowed: readonly string[]): string | undefined {
  return Object.keys(value).find((key) => !allowed.includes(key));
}

/**
 * Refuses a configuration object with a key `allowed` does not list, naming the option as
 * `<path><separator><key>`: a misspelt option would otherwise be ignored and its default used.
 */
export function rejectUnknownOptions(
  path: string,
  value: object,
  allowed: readonly string[],
  separator = '.',
  allowedLabel = 'allowed here',
): void {
  const key = unknownKey(value, allowed);
  if (key === undefined) return;
  const where = path ? `${path}${separator}${key}` : key;
  throw new OutboxConfigurationError(where, `unknown option; ${allowedLabel}: ${allowed.join(', ')}`);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A whole number from `min` to `max`, or `fallback` when not given. */
export function integerOption(
  option: string,
  value: unknown,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new OutboxConfigurationError(
      option,
      `expected a whole number from ${min} to ${max}, got ${describeValue(value)}` +
        (typeof value === 'string' ? ' (convert environment variables with Number() and check them)' : ''),
    );
  }
  if (value < min || value > max) {
    throw new OutboxConfigurationError(option, `expected a whole number from ${min} to ${max}, got ${value}`);
  }
  return value;
}

export function booleanOption(option: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') {
    throw new OutboxConfigurationError(option, `expected true or false, got ${describeValue(value)}`);
  }
  return value;
}

/** A nested options object (`worker`, `retry`, a route): a plain object with known keys only, or `{}` when not given. */
export function optionSection(option: string, value: unknown, keys: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {};
  if (!isPlainObject(value)) {
    throw new OutboxConfigurationError(option, `expected an object, got ${describeValue(value)}`);
  }
  rejectUnknownOptions(option, value, keys);
  return value;
}
