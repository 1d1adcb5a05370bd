import { OutboxPayloadTooLargeError, OutboxValidationError } from '../../lib';
import { canonicalJson, validateEvent } from '../../lib/outbox.validation';

const ok = { topic: 'order.placed', payload: { a: 1 } };

function field(item: Record<string, unknown>, max = 1024 * 1024): string {
  try {
    validateEvent({ ...ok, ...item } as never, max);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return (error as OutboxValidationError).field;
  }
  throw new Error('accepted');
}

describe('validateEvent', () => {
  it('accepts the limits exactly', () => {
    const v = validateEvent(
      { topic: 'a'.repeat(128), payload: 'x', key: '~'.repeat(255), dedupeKey: ' ', headers: { 'x-a': '' }, delayMs: 0 },
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

describe('canonicalJson', () => {
  it('ignores key order, keeps array order', () => {
    expect(canonicalJson({ b: 1, a: [2, { d: 1, c: 2 }] })).toBe(canonicalJson({ a: [2, { c: 2, d: 1 }], b: 1 }));
    expect(canonicalJson([1, 2])).not.toBe(canonicalJson([2, 1]));
  });
});
