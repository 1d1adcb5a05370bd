import { Logger } from '@nestjs/common';
import { OutboxLogRecord } from './log-record';

/**
 * A Nest `Logger` whose text messages — and the text of `OutboxLogRecord`s — pass through `redact` (the
 * module's `redactError`) first: what the outbox logs of an event's failure never carries what the
 * application said is secret.
 */
export class RedactingLogger extends Logger {
  constructor(
    context: string,
    private readonly redact: (text: string) => string,
  ) {
    super(context);
  }

  override log(message: unknown, ...rest: unknown[]): void {
    super.log(this.clean(message), ...rest);
  }

  override warn(message: unknown, ...rest: unknown[]): void {
    super.warn(this.clean(message), ...rest);
  }

  override error(message: unknown, ...rest: unknown[]): void {
    super.error(this.clean(message), ...rest.map((part) => this.clean(part)));
  }

  private clean(message: unknown): unknown {
    if (message instanceof OutboxLogRecord) return message.withText(this.redact(message.msg));
    return typeof message === 'string' ? this.redact(message) : message;
  }
}
