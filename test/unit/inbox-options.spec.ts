import { OutboxConfigurationError, OutboxInbox, OutboxInboxModule } from '../../lib';

describe('the inbox’s options', () => {
  it.each([
    ['an unknown option', { retention: 5 }, 'inbox.retention'],
    ['a retention under a second', { retentionMs: 10 }, 'inbox.retentionMs'],
    ['a retention given as text', { retentionMs: '7d' }, 'inbox.retentionMs'],
    ['a retention interval of 0', { retentionIntervalMs: 0 }, 'inbox.retentionIntervalMs'],
    ['a table name with a dash', { tableName: 'my-inbox' }, 'inbox.tableName'],
    ['an empty webhook secret', { webhook: { secret: '' } }, 'inbox.webhook.secret'],
    ['no webhook secret', { webhook: {} }, 'inbox.webhook.secret'],
    [
      'a signature header with a space',
      { webhook: { secret: 's', signatureHeader: 'X Sig' } },
      'inbox.webhook.signatureHeader',
    ],
    ['an unknown webhook option', { webhook: { secret: 's', tolerance: 5 } }, 'inbox.webhook.tolerance'],
  ])('refuses %s at forRoot(), naming the option', (_, options, option) => {
    let error: unknown;
    try {
      OutboxInboxModule.forRoot(options as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect((error as OutboxConfigurationError).option).toBe(option);
  });

  it('takes retention off with false, and several secrets while one is rotated', () => {
    expect(() => OutboxInboxModule.forRoot({ retentionMs: false, webhook: { secret: ['old', 'new'] } })).not.toThrow();
  });
});

describe('@OutboxInbox()', () => {
  it.each([
    ['a consumer name with a space', 'bill ing', {}, /consumer name must be 1 to 100/],
    ['a consumer name over 100 characters', 'b'.repeat(101), {}, /consumer name must be 1 to 100/],
    ['an unknown option', 'billing', { ack: true }, /ack.*unknown option/],
    ['acknowledge as text', 'billing', { acknowledge: 'yes' }, /acknowledge.*expected true or false/],
  ])('refuses %s where the class is declared', (_, consumer, options, message) => {
    expect(() => OutboxInbox(consumer, options as never)).toThrow(OutboxConfigurationError);
    expect(() => OutboxInbox(consumer, options as never)).toThrow(message);
  });
});
