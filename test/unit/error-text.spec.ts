import { Logger, type LoggerService } from '@nestjs/common';
import { OutboxLogRecord } from '../../lib';
import { ErrorText, WITHHELD_ERROR } from '../../lib/utils/error-text';

const tenantHidden = (text: string) => text.replaceAll('acme-internal-42', '<tenant>');
const leak = new Error('cannot reach postgres://app:pg-s3cret@db/orders for acme-internal-42');

describe('ErrorText', () => {
  it("describes an error as describeError does, then applies the application's redactError to that text", () => {
    const seen: string[] = [];
    const errorText = new ErrorText((text) => {
      seen.push(text);
      return tenantHidden(text);
    });
    expect(errorText.describe(leak)).toBe('Error: cannot reach postgres://[redacted]@db/orders for <tenant>');
    // The hook is given the text with the outbox's own redaction done.
    expect(seen).toEqual(['Error: cannot reach postgres://[redacted]@db/orders for acme-internal-42']);
    expect(new ErrorText().describe(leak)).toBe(
      'Error: cannot reach postgres://[redacted]@db/orders for acme-internal-42',
    );
  });

  it('withholds a text the hook throws on or returns no string for', () => {
    const throwing = new ErrorText(() => {
      throw new Error('bug');
    });
    expect(throwing.describe(leak)).toBe(WITHHELD_ERROR);
    expect(throwing.redact('anything')).toBe(WITHHELD_ERROR);
    const silent = new ErrorText((() => undefined) as unknown as (text: string) => string);
    expect(silent.redact('anything')).toBe(WITHHELD_ERROR);
  });

  it('describes a stack redacted the same way, and nothing when there is none', () => {
    const errorText = new ErrorText(tenantHidden);
    const stack = errorText.describeStack(leak)!;
    expect(stack).toMatch(/^Error: cannot reach postgres:\/\/\[redacted\]@db\/orders for <tenant>\n\s+at /);
    expect(errorText.describeStack('a string')).toBeUndefined();
    expect(errorText.describeStack(null)).toBeUndefined();
  });

  describe('logger', () => {
    const lines: Array<[string, unknown, unknown[]]> = [];
    const capture =
      (level: string) =>
      (message: unknown, ...rest: unknown[]) =>
        lines.push([level, message, rest]);
    const sink: LoggerService = { log: capture('log'), warn: capture('warn'), error: capture('error') };
    beforeAll(() => {
      Logger.overrideLogger(sink);
    });
    afterAll(() => {
      Logger.overrideLogger(['log', 'error', 'warn']);
    });

    it("passes every line, a log record's text too, through the hook, under its context", () => {
      const logger = new ErrorText(tenantHidden).logger('OutboxWorker');
      logger.log('deleted for acme-internal-42');
      logger.warn(new OutboxLogRecord('event e1 of acme-internal-42 failed', { eventId: 'e1', topic: 't' }));
      logger.error('failed for acme-internal-42', 'stack of acme-internal-42');
      expect(lines).toEqual([
        ['log', 'deleted for <tenant>', ['OutboxWorker']],
        ['warn', new OutboxLogRecord('event e1 of <tenant> failed', { eventId: 'e1', topic: 't' }), ['OutboxWorker']],
        ['error', 'failed for <tenant>', ['stack of <tenant>', 'OutboxWorker']],
      ]);
    });
  });
});
