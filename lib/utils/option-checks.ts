import { OutboxConfigurationError } from '../errors/outbox.errors';
import { describeValue } from './describe-value';

/**
 * How one kind of input (module options, operations' arguments, publish arguments) refuses what is not an
 * object with known keys: what it takes for an object, and the errors it throws, each kind worded as it
 * always has been.
 */
export interface KnownKeysRule {
  isObject(value: unknown): value is object;
  /** `value` at `where` is not what was `expected` ("an object", "true or false"). */
  wrongValue(where: string, expected: string, value: unknown): Error;
  unknownKey(where: string, key: string, allowed: readonly string[]): Error;
}

/**
 * The one check of an object whose keys are known: `{}` when not given; otherwise an object that `rule`
 * takes for one, with no key `allowed` does not list (a misspelt option or field would otherwise be
 * ignored and its default used). Throws the error `rule` builds.
 */
export function knownKeys(
  where: string,
  value: unknown,
  allowed: readonly string[],
  rule: KnownKeysRule,
): Record<string, unknown> {
  if (value === undefined) return {};
  if (!rule.isObject(value)) throw rule.wrongValue(where, 'an object', value);
  const key = Object.keys(value).find((k) => !allowed.includes(k));
  if (key !== undefined) throw rule.unknownKey(where, key, allowed);
  return value as Record<string, unknown>;
}

/** Module options: an `OutboxConfigurationError` naming the option as `<path><separator><key>`. */
function optionKeys(
  isObject: (value: unknown) => value is object,
  separator = '.',
  allowedLabel = 'allowed here',
): KnownKeysRule {
  return {
    isObject,
    wrongValue: (option, expected, value) =>
      new OutboxConfigurationError(option, `expected ${expected}, got ${describeValue(value)}`),
    unknownKey: (path, key, allowed) =>
      new OutboxConfigurationError(
        path ? `${path}${separator}${key}` : key,
        `unknown option; ${allowedLabel}: ${allowed.join(', ')}`,
      ),
  };
}

const isAnyObject = (value: unknown): value is object => typeof value === 'object' && value !== null;
const OPTION_SECTION = optionKeys(isPlainObject);

/**
 * Refuses a configuration object (its caller checked that it is one) with a key `allowed` does not list,
 * naming the option as `<path><separator><key>`.
 */
export function rejectUnknownOptions(
  path: string,
  value: object,
  allowed: readonly string[],
  separator = '.',
  allowedLabel = 'allowed here',
): void {
  knownKeys(path, value, allowed, optionKeys(isAnyObject, separator, allowedLabel));
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value) as object | null;
  return proto === Object.prototype || proto === null;
}

/** A whole number from `min` to `max`, or `fallback` when not given. */
export function integerOption(option: string, value: unknown, fallback: number, min: number, max: number): number {
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

/** `true` or `false`, or `fallback` when not given; refused as `rule`'s kind of input refuses (module options by default). */
export function booleanOption(
  option: string,
  value: unknown,
  fallback: boolean,
  rule: KnownKeysRule = OPTION_SECTION,
): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw rule.wrongValue(option, 'true or false', value);
  return value;
}

/** A nested options object (`worker`, `retry`, a route): a plain object with known keys only, or `{}` when not given. */
export function optionSection(option: string, value: unknown, keys: readonly string[]): Record<string, unknown> {
  return knownKeys(option, value, keys, OPTION_SECTION);
}
