import { MAX_ERROR_LENGTH, storableError } from '../../lib/delivery/failure-policy';

describe('storableError', () => {
  it('writes NUL as its escape and a lone surrogate as U+FFFD, keeping the rest', () => {
    expect(storableError('Unexpected token \u0000 in JSON at position 0')).toBe(
      'Unexpected token \\u0000 in JSON at position 0',
    );
    expect(storableError('cut \ud83d here, \ude00 there, whole \ud83d\ude00')).toBe(
      'cut \ufffd here, \ufffd there, whole \ud83d\ude00',
    );
    expect(storableError('plain')).toBe('plain');
  });

  it('bounds megabytes of text to MAX_ERROR_LENGTH, never ending inside a surrogate pair', () => {
    expect(storableError('x'.repeat(5_000_000))).toBe('x'.repeat(MAX_ERROR_LENGTH));
    const split = 'a'.repeat(MAX_ERROR_LENGTH - 1) + '\ud83d\ude00tail';
    expect(storableError(split)).toBe('a'.repeat(MAX_ERROR_LENGTH - 1));
    const whole = 'a'.repeat(MAX_ERROR_LENGTH - 2) + '\ud83d\ude00tail';
    expect(storableError(whole)).toBe('a'.repeat(MAX_ERROR_LENGTH - 2) + '\ud83d\ude00');
    expect(storableError('\u0000'.repeat(MAX_ERROR_LENGTH)).length).toBe(MAX_ERROR_LENGTH);
  });
});
