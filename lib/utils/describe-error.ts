import { hidingSecrets, redactSecrets } from './redact';

/**
 * An error by its shape, not by `instanceof Error`: one made in another realm (a vm context, or a
 * native driver whose error class was bound to another context, as under Jest) is an error too.
 */
function isErrorLike(error: unknown): error is { name: string; message: string } {
  if (error instanceof Error) return true;
  const e = error as { name?: unknown; message?: unknown } | null;
  return typeof e === 'object' && e !== null && typeof e.name === 'string' && typeof e.message === 'string';
}

/**
 * One line for a log or `last_error`, whatever was thrown, with its secrets redacted (`redactSecrets`).
 * A rejection that is not an Error says what its message and code say (its own, or those of the error it
 * carries in `err`, `error` or `cause`), and is written whole only when it has neither, secret fields hidden.
 */
export function describeError(error: unknown): string {
  const text = unredacted(error);
  if (text.length <= MAX_DESCRIBED) return redactSecrets(text);
  // Megabytes of message cost only what any reader keeps (`last_error` keeps 4,000 characters). The
  // cut is redacted as a cut: a secret it splits is hidden whole, not its first part left.
  return `${redactSecrets(text.slice(0, MAX_DESCRIBED), { cut: true })}…`;
}

const MAX_DESCRIBED = 16_000;

function unredacted(error: unknown): string {
  if (isErrorLike(error)) return `${error.name}: ${error.message}`;
  if (typeof error === 'string') return `non-Error rejection: ${error}`;
  const said = messageAndCode(error);
  if (said) return `non-Error rejection: ${said}`;
  let text: string;
  try {
    text = JSON.stringify(error, hidingSecrets) ?? String(error);
  } catch {
    text = String(error);
  }
  return `non-Error rejection: ${text}`;
}

/** "message (code C)", "message" or "code C", from an object or the error it carries; else undefined. */
function messageAndCode(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const { err, error, cause } = value as Record<string, unknown>;
  for (const candidate of [value, err, error, cause]) {
    if (typeof candidate !== 'object' || candidate === null) continue;
    const { message, code } = candidate as { message?: unknown; code?: unknown };
    const codeText = typeof code === 'string' || typeof code === 'number' ? `code ${code}` : '';
    if (typeof message === 'string' && message) return codeText ? `${message} (${codeText})` : message;
    if (codeText) return codeText;
  }
  return undefined;
}

/**
 * A message and its causes, e.g. "fetch failed: connect ECONNREFUSED 127.0.0.1:4000": for errors whose
 * own message says little without its cause (fetch's), where `describeError` gives name and message.
 */
export function describeErrorChain(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 4 && current !== undefined && current !== null; depth++) {
    // Duck-typed: fetch's errors come from Node's internal realm, where `instanceof Error` can fail.
    if (typeof current === 'object' && typeof (current as Error).message === 'string') {
      const { message, name, code, cause } = current as Error & { code?: unknown };
      const text = message || (typeof code === 'string' ? code : name);
      if (text && !parts.includes(text)) parts.push(text);
      current = cause;
    } else {
      // A string, a number, or an object without a message: what describeError says of it.
      parts.push(typeof current === 'string' ? current : describeError(current));
      break;
    }
  }
  return redactSecrets(parts.join(': ') || 'unknown error');
}
