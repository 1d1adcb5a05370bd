import { OutboxConfigurationError } from '../../lib';
import { resolveOutboxOptions, WITHHELD_ERROR } from '../../lib/outbox.options';
import { describeError, describeErrorChain } from '../../lib/utils/describe-error';
import { isSecretName, REDACTED, redactSecrets } from '../../lib/utils/redact';

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

describe('redactSecrets, where it used to leave a secret', () => {
  it.each([
    [
      'a lower-case Bearer scheme',
      'sent authorization: bearer abc.def.ghi to the partner',
      'sent authorization: [redacted] to the partner',
    ],
    ['a Basic scheme in capitals', 'AUTHORIZATION: BASIC dXNlcjpwYXNz refused', 'AUTHORIZATION: [redacted] refused'],
    ['a Basic scheme in lower case', 'proxy-authorization: basic dXNlcjpwYXNz', 'proxy-authorization: [redacted]'],
  ])('an Authorization header with %s, token and all', (_name, text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it.each([
    ['of strings', '{"tokens":["t-1","t-2"],"n":1}', '{"tokens":"[redacted]","n":1}'],
    ['of objects', '{"apiKeys":[{"id":"ci","value":"ak-9"}],"region":"eu"}', '{"apiKeys":"[redacted]","region":"eu"}'],
    [
      'in JSON within a JSON string, a ] in one of its strings',
      '"{\\"tokens\\":[\\"a]b\\",\\"c\\\\\\"d\\"],\\"n\\":1}"',
      '"{\\"tokens\\":\\"[redacted]\\",\\"n\\":1}"',
    ],
    ['as util.inspect writes it', "{ secrets: [ 's-1', 's-2' ], n: 1 }", '{ secrets: [redacted], n: 1 }'],
  ])('a JSON array %s under a secret name, whole', (_name, text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it('leaves an array under another name to the names inside it', () => {
    expect(redactSecrets('{"ids":["a","b"],"items":["password=p-1"]}')).toBe(
      '{"ids":["a","b"],"items":["password=[redacted]"]}',
    );
  });

  it.each([
    ['a Cookie header', 'Cookie: a=1; session_id=s-55\nHost: h', 'Cookie: [redacted]\nHost: h'],
    ['cookies without spaces', 'cookie: a=1;session_id=s-55;b=2', 'cookie: [redacted]'],
    [
      'Set-Cookie headers joined with a comma, dates and all',
      'set-cookie: a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT, session=s-66; HttpOnly',
      'set-cookie: [redacted]',
    ],
    [
      'a Cookie header within a JSON string',
      '{"message":"Cookie: a=1; session_id=s-55","status":500}',
      '{"message":"Cookie: [redacted]","status":500}',
    ],
  ])('every cookie of %s, not only the first', (_name, text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it.each([
    ['a raw @', 'postgres://u:p@ss@db.internal/app', 'postgres://[redacted]@db.internal/app'],
    ['two raw @', 'amqp://u:a@b@c@rabbit:5672', 'amqp://[redacted]@rabbit:5672'],
    ['a raw #', 'postgres://u:pa#ss@db.internal:5432/app', 'postgres://[redacted]@db.internal:5432/app'],
    ['a raw /', 'mysql://root:ab/cd=@127.0.0.1:3306/test failed', 'mysql://[redacted]@127.0.0.1:3306/test failed'],
    ['/, # and ?', 'redis://:a/b#c?d@cache:6379/0', 'redis://[redacted]@cache:6379/0'],
    [
      'a raw # in JSON within a JSON string',
      '"{\\"url\\":\\"postgres://u:p#w@db/app\\"}"',
      '"{\\"url\\":\\"postgres://[redacted]@db/app\\"}"',
    ],
  ])('a URL password with %s, whole', (_name, text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it.each([
    ['a scoped package', 'GET https://registry.npmjs.org/@nestjs/core 404'],
    ['an email in the query', 'GET https://api.example.com/users?email=ann@example.com 500'],
    ['an email in the path', 'GET https://api.example.com/users/ann@example.com 500'],
  ])('leaves a URL without a user or password alone: %s', (_name, text) => {
    expect(redactSecrets(text)).toBe(text);
  });

  it('reads a port and an @ further on as a password with a raw /: no secret is left, the host goes too', () => {
    expect(redactSecrets('GET https://api.example.com:8443/users/ann@example.com 500')).toBe(
      'GET https://[redacted]@example.com 500',
    );
  });

  it('hides an escaped value that the JSON string holding it ends, as a webhook answer cut at 200 characters', () => {
    expect(redactSecrets('answered 401; response body: "{\\"token\\":\\"tk-12345"')).toBe(
      'answered 401; response body: "{\\"token\\":\\"[redacted]\\""',
    );
  });

  it.each([
    ['a letter', 'a'.repeat(16_000)],
    ['names with dots', 'a.'.repeat(8_000)],
    ['names and colons', 'a:'.repeat(8_000)],
    ['schemes', 'a://'.repeat(4_000)],
  ])('reads 16,000 characters of %s through, and the secret after them', (_name, long) => {
    expect(redactSecrets(`${long} token=t-1 "password":"p-1"`)).toBe(
      `${long} token=[redacted] "password":"[redacted]"`,
    );
  });

  it('reads 16,000 characters of unclosed arrays and quotes, hiding what follows a secret name', () => {
    expect(redactSecrets(`ok ${'"tokens":['.repeat(1_600)}`)).toBe('ok "tokens":"[redacted]"');
    expect(redactSecrets(`ok "password":"${'\\'.repeat(16_000)}`)).toBe('ok "password":"[redacted]"');
  });
});

describe('describeError cuts at 16,000 characters and never leaves the first part of a secret', () => {
  const LIMIT = 16_000;
  /** An Error whose described text ("Error: " and its message) the limit cuts `before` characters into `secret`. */
  function cutInside(lead: string, secret: string, before: number): Error {
    const pad = LIMIT - 'Error: '.length - lead.length - before;
    return new Error(`${'x'.repeat(pad)}${lead}${secret} and what follows`);
  }

  it.each([
    ['a JSON value', ' {"password":"', 'pw-0123456789abcdef"}'],
    ['a JSON value within a JSON string', ' "{\\"clientSecret\\":\\"', 'cs-0123456789abcdef\\"}"'],
    ['a URL password', ' postgres://app:', 'pg-0123456789abcdef@db.internal/app'],
    ['a URL password after a raw @', ' postgres://app:pg@', 'pg-0123456789abcdef@db.internal/app'],
    ['a later cookie', ' Cookie: a=1; session_id=', 'sid-0123456789abcdef'],
    ['a token array', ' {"tokens":["', 'tk-0123456789abcdef"]}'],
    ['a Bearer token', ' authorization: bearer ', 'bt-0123456789abcdef'],
  ])('%s cut in two', (_name, lead, secret) => {
    const error = cutInside(lead, secret, 8);
    // The limit falls eight characters into the secret.
    expect(`Error: ${error.message}`.slice(0, LIMIT).endsWith(`${lead}${secret.slice(0, 8)}`)).toBe(true);
    const described = describeError(error);
    expect(described.endsWith('…')).toBe(true);
    expect(described).toContain(REDACTED);
    expect(described).not.toContain(secret.slice(0, 3));
    expect(described.length).toBeLessThanOrEqual(LIMIT + REDACTED.length + 1);
  });
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
    const { errorText } = resolveOutboxOptions({ redactError: (text) => text.replaceAll('acme', '<tenant>') });
    expect(errorText.redact('tenant acme failed')).toBe('tenant <tenant> failed');
    const throwing = resolveOutboxOptions({
      redactError: () => {
        throw new Error('bug');
      },
    });
    expect(throwing.errorText.redact('anything')).toBe(WITHHELD_ERROR);
    const silent = resolveOutboxOptions({ redactError: (() => undefined) as unknown as (text: string) => string });
    expect(silent.errorText.redact('anything')).toBe(WITHHELD_ERROR);
    expect(resolveOutboxOptions({}).errorText.redact('as is')).toBe('as is');
  });

  it('must be a function', () => {
    expect(() => resolveOutboxOptions({ redactError: 'mask' as unknown as (text: string) => string })).toThrow(
      OutboxConfigurationError,
    );
  });
});
