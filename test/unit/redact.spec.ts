import { OutboxConfigurationError } from '../../lib';
import { resolveOutboxOptions, WITHHELD_ERROR } from '../../lib/outbox.options';
import { describeError, describeErrorChain } from '../../lib/utils/describe-error';
import { isSecretName, redactSecrets } from '../../lib/utils/redact';

describe('redactSecrets', () => {
  it.each([
    [
      'a URL user and password',
      'connect to amqp://guest:guest@127.0.0.1:5999 failed',
      'connect to amqp://[redacted]@127.0.0.1:5999 failed',
    ],
    ['a URL user alone', 'GET https://deploy-bot@git.example/repo', 'GET https://[redacted]@git.example/repo'],
    ['a JSON field', '{"user":"ann","password":"hunter2"}', '{"user":"ann","password":"[redacted]"}'],
    [
      'a JSON field with escaped quotes',
      '"{\\"apiKey\\":\\"ak-1\\",\\"n\\":1}"',
      '"{\\"apiKey\\":\\"[redacted]\\",\\"n\\":1}"',
    ],
    [
      'an Authorization header',
      'sent Authorization: Bearer abc.def.ghi to the partner',
      'sent Authorization: [redacted] to the partner',
    ],
    ['a query parameter', 'GET /hook?token=t-42&page=2', 'GET /hook?token=[redacted]&page=2'],
    [
      'a connection string parameter',
      'Server=db;User Id=sa;Password=P@ss;Database=x',
      'Server=db;User Id=sa;Password=[redacted];Database=x',
    ],
    ['a quoted value in single quotes', "client_secret='s-9' rejected", "client_secret='[redacted]' rejected"],
    ['a cookie', 'set-cookie: sid=abc123', 'set-cookie: [redacted]'],
  ])('hides %s', (_name, text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it.each([
    ['text without secrets', 'connect ECONNREFUSED 127.0.0.1:5999'],
    ['a word that merely contains "pass"', 'timeout passed: 5000 ms'],
    ['the outbox key header', '{"x-outbox-key":"order-1"}'],
    ['a nested object, left to the names inside it', '{"token":{"kind":"jwt"}}'],
  ])('leaves %s alone', (_name, text) => {
    expect(redactSecrets(text)).toBe(text);
  });

  it.each([
    'password',
    'DB_PASSWORD',
    'x-api-key',
    'apiKey',
    'accessToken',
    'client_secret',
    'Authorization',
    'pwd',
    'pass',
  ])('takes %s for a secret name', (name) => expect(isSecretName(name)).toBe(true));

  it.each(['passed', 'key', 'x-outbox-key', 'topic', 'bypass'])('does not take %s for one', (name) =>
    expect(isSecretName(name)).toBe(false),
  );
});

describe('describeError redacts, and says what a non-Error rejection says', () => {
  it('pulls out the message and code of the error a rejection carries, not its URL', () => {
    const err = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5999'), { code: 'ECONNREFUSED', errno: -111 });
    expect(describeError({ err, url: 'amqp://guest:guest@127.0.0.1:5999' })).toBe(
      'non-Error rejection: connect ECONNREFUSED 127.0.0.1:5999 (code ECONNREFUSED)',
    );
  });

  it('writes an object without message or code whole, its secret fields hidden', () => {
    expect(describeError({ status: 'bad', auth: { password: 'p', user: 'u' }, url: 'redis://:pw@h:1' })).toBe(
      'non-Error rejection: {"status":"bad","auth":{"password":"[redacted]","user":"u"},"url":"redis://[redacted]@h:1"}',
    );
  });

  it('redacts an Error whose message embeds a connection string', () => {
    expect(describeError(new Error('no route to postgres://app:s3cret@db:5432/app?sslpassword=k'))).toBe(
      'Error: no route to postgres://[redacted]@db:5432/app?sslpassword=[redacted]',
    );
    expect(describeErrorChain(new Error('fetch failed', { cause: new Error('token=abc refused') }))).toBe(
      'fetch failed: token=[redacted] refused',
    );
  });
});

describe('the redactError option', () => {
  it('is applied as given, and withholds the text when it throws or returns no string', () => {
    const { redactError } = resolveOutboxOptions({ redactError: (text) => text.replaceAll('acme', '<tenant>') });
    expect(redactError('tenant acme failed')).toBe('tenant <tenant> failed');
    const throwing = resolveOutboxOptions({
      redactError: () => {
        throw new Error('bug');
      },
    });
    expect(throwing.redactError('anything')).toBe(WITHHELD_ERROR);
    const silent = resolveOutboxOptions({ redactError: (() => undefined) as unknown as (text: string) => string });
    expect(silent.redactError('anything')).toBe(WITHHELD_ERROR);
    expect(resolveOutboxOptions({}).redactError('as is')).toBe('as is');
  });

  it('must be a function', () => {
    expect(() => resolveOutboxOptions({ redactError: 'mask' as unknown as (text: string) => string })).toThrow(
      OutboxConfigurationError,
    );
  });
});
