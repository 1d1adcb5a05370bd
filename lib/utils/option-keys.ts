import { OutboxConfigurationError } from '../errors/outbox.errors';

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
