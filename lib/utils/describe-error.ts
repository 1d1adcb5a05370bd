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
    text = typeof error === 'string' ? error : JSON.stringify(error) ?? String(error);
  } catch {
    text = String(error);
  }
  return `non-Error rejection: ${text}`;
}
