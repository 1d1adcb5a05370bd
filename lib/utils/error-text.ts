import type { Logger } from '@nestjs/common';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { describeError } from './describe-error';
import { redactSecrets } from './redact';
import { RedactingLogger } from './redacting-logger';

/** What stands for an error text the application's `redactError` could not clean. */
export const WITHHELD_ERROR = '[error text withheld: redactError threw]';

/**
 * The one path of an outbox's error texts (see `OutboxErrorText`): `describeError`'s line and the
 * outbox's own redaction, then the application's `redactError`. Made once per outbox when its options
 * are resolved (`options.errorText`); the module provides it as `OUTBOX_ERROR_TEXT`.
 */
export class ErrorText implements OutboxErrorText {
  /** `redactError`: the application's hook, checked to be a function; none: the outbox's redaction alone. */
  constructor(private readonly redactError?: (text: string) => string) {}

  describe(error: unknown): string {
    return this.redact(describeError(error));
  }

  describeStack(error: unknown): string | undefined {
    const stack = (error as { stack?: unknown } | null)?.stack;
    return typeof stack === 'string' ? this.redact(redactSecrets(stack)) : undefined;
  }

  redact(text: string): string {
    // Called as a plain function, as the application wrote it.
    const hook = this.redactError;
    if (!hook) return text;
    try {
      const clean = hook(text);
      return typeof clean === 'string' ? clean : WITHHELD_ERROR;
    } catch {
      return WITHHELD_ERROR;
    }
  }

  logger(context: string): Logger {
    return new RedactingLogger(context, (text) => this.redact(text));
  }
}
