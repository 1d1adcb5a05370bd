import type { Logger } from '@nestjs/common';

/**
 * How an outbox writes every error text it reports — the log lines, the stored `last_error`, the
 * lifecycle events, the span status and exception, the health details, the operations' notes — made
 * once from its options (`ErrorText` in utils/error-text.ts), so no sink can forget a step.
 */
export interface OutboxErrorText {
  /**
   * One error as every sink writes it: its name and message (or what a non-Error rejection says), cut
   * at 16,000 characters, the secrets the outbox knows of hidden, then the application's `redactError`.
   */
  describe(error: unknown): string;
  /** An error's stack, redacted as `describe` redacts; undefined when it has none. */
  describeStack(error: unknown): string | undefined;
  /**
   * The application's `redactError` (made safe: a throw withholds the text) on a text that carries error
   * texts: a log line, a stored or emitted error put together from several.
   */
  redact(text: string): string;
  /** A Nest `Logger` of `context` whose every line passes `redact` first. */
  logger(context: string): Logger;
}
