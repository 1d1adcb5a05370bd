import { OutboxPayloadTooLargeError, OutboxValidationError } from '../../lib';
import { OutboxHeadersTooLargeError } from '../../lib/errors/outbox.errors';
import { MAX_HEADERS_BYTES, validateEvent } from '../../lib/publishing/outbox.validation';
import { headersOfBytes } from '../fixtures/headers';

const ok = { topic: 'order.placed', payload: { a: 1 } };

function field(item: Record<string, unknown>, max = 1024 * 1024): string {
  try {
    validateEvent({ ...ok, ...item }, max);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return (error as OutboxValidationError).field;
  }
  throw new Error('accepted');
}

describe('validateEvent', () => {
  it('accepts the limits exactly', () => {
    const v = validateEvent(
      {
        topic: 'a'.repeat(128),
        payload: 'x',
        key: '~'.repeat(255),
        dedupeKey: ' ',
        headers: { 'x-a': '' },
        delayMs: 0,
      },
      1024,
    );
    expect(v.key).toHaveLength(255);
    expect(v.headersJson).toBe('{"x-a":""}');
  });

  it.each([
    ['topic', { topic: '' }],
    ['topic', { topic: 'a'.repeat(129) }],
    ['topic', { topic: 'order placed' }],
    ['topic', { topic: 42 }],
    ['key', { key: '' }],
    ['key', { key: 'é' }],
    ['key', { key: 'k'.repeat(256) }],
    ['dedupeKey', { dedupeKey: 'line\nbreak' }],
    ['payload', { payload: undefined }],
    ['payload', { payload: () => 1 }],
    ['payload', { payload: { n: BigInt(1) } }],
    ['payload', { payload: { s: 'nul \u0000 inside' } }],
    ['headers', { headers: { 'bad name': 'x' } }],
    ['headers', { headers: { a: 1 } }],
    ['headers', { headers: ['a'] }],
    ['delayMs', { delayMs: -1 }],
    ['delayMs', { delayMs: 1.5 }],
    ['delayMs', { delayMs: '10' }],
    ['delayMs', { delayMs: 10, availableAt: new Date() }],
    ['availableAt', { availableAt: new Date('nope') }],
    ['availableAt', { availableAt: '2030-01-01' }],
  ])('rejects %s in %p', (expected, item) => {
    expect(field(item)).toBe(expected);
  });

  it('rejects a circular payload with a hint', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => validateEvent({ topic: 't', payload: cyclic }, 1000)).toThrow(/circular/);
  });

  it('accepts an escaped backslash followed by u0000 (not a NUL)', () => {
    expect(validateEvent({ topic: 't', payload: '\\u0000' }, 1000).payloadJson).toBe('"\\\\u0000"');
  });

  it('measures the limit in UTF-8 bytes', () => {
    const error = (() => {
      try {
        validateEvent({ topic: 't', payload: 'é'.repeat(10) }, 21);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(OutboxPayloadTooLargeError);
    expect((error as OutboxPayloadTooLargeError).bytes).toBe(22);
  });
});

describe('lone UTF-16 surrogates', () => {
  const emoji = '🚀'; // \ud83d\ude80
  const cut = `launch ${emoji.slice(0, 1)}`;

  it.each([
    ['payload', { payload: cut }],
    ['payload', { payload: { deep: [{ text: emoji.slice(1) }] } }],
    ['payload', { payload: { [`key ${emoji.slice(0, 1)}`]: 1 } }],
    ['payload', { payload: `${emoji.slice(1)}${emoji.slice(0, 1)}` }],
    ['payload', { payload: `\\${emoji.slice(0, 1)}` }],
    ['headers', { headers: { 'x-title': cut } }],
    ['headers', { headers: { 'x-title': `${emoji.slice(1)}x` } }],
  ])('rejects one in the %s of %p', (expected, item) => {
    expect(field(item)).toBe(expected);
  });

  it('says which code unit and why', () => {
    expect(() => validateEvent({ topic: 't', payload: { a: cut } }, 1000)).toThrow(/\\ud83d, a lone UTF-16 surrogate/);
    expect(() => validateEvent({ topic: 't', payload: {}, headers: { a: cut } }, 1000)).toThrow(
      /header "a" contains \\ud83d, a lone UTF-16 surrogate/,
    );
  });

  it('accepts paired surrogates, and the text "\\ud83d" with its backslash escaped', () => {
    const v = validateEvent({ topic: 't', payload: { [emoji]: [emoji, '\\ud83d'] }, headers: { a: emoji } }, 1000);
    expect(JSON.parse(v.payloadJson)).toEqual({ [emoji]: [emoji, '\\ud83d'] });
    expect(v.headers.a).toBe(emoji);
  });
});

describe('the size of all headers together', () => {
  it('accepts exactly the limit, counted in UTF-8 bytes', () => {
    for (const char of ['x', 'é']) {
      const headers = headersOfBytes(MAX_HEADERS_BYTES, char);
      expect(Object.values(headers).every((v) => v.length <= 4096)).toBe(true);
      expect(Buffer.byteLength(validateEvent({ topic: 't', payload: 1, headers }, 1000).headersJson)).toBe(
        MAX_HEADERS_BYTES,
      );
    }
  });

  it('refuses one byte more, naming the size and the limit', () => {
    const headers = headersOfBytes(MAX_HEADERS_BYTES + 1, 'é');
    let error: unknown;
    try {
      validateEvent({ topic: 't', payload: 1, headers }, 1000);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxHeadersTooLargeError);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect(error).toMatchObject({ field: 'headers', bytes: MAX_HEADERS_BYTES + 1, limit: MAX_HEADERS_BYTES });
    expect((error as Error).message).toMatch(/16385 bytes of JSON, over the limit of 16384 bytes/);
  });
});
