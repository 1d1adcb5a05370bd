/**
 * An error by its shape, not by `instanceof Error`: one made in another realm (a vm context, or a
 * native driver whose error class was bound to another context, as under Jest) is an error too.
 */
function isErrorLike(error: unknown): error is { name: string; message: string } {
  if (error instanceof Error) return true;
  const e = error as { name?: unknown; message?: unknown } | null;
  return typeof e === 'object' && e !== null && typeof e.name === 'string' && typeof e.message === 'string';
}

/** One line for a log or `last_error`, whatever was thrown. */
export function describeError(error: unknown): string {
  if (isErrorLike(error)) return `${error.name}: ${error.message}`;
  let text: string;
  try {
    text = typeof error === 'string' ? error : (JSON.stringify(error) ?? String(error));
  } catch {
    text = String(error);
  }
  return `non-Error rejection: ${text}`;
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
  return parts.join(': ') || 'unknown error';
}
