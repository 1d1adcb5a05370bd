import { topicMatches, validateTopicPattern } from '../../lib/utils/topic';

describe('topic patterns', () => {
  it.each([
    ['order.placed', 'order.placed', true],
    ['order.placed', 'order.paid', false],
    ['order.*', 'order.placed', true],
    ['order.*', 'order', false],
    ['order.*', 'order.placed.eu', false],
    ['*.placed', 'order.placed', true],
    ['order.#', 'order', true],
    ['order.#', 'order.placed', true],
    ['order.#', 'order.placed.eu.north', true],
    ['order.#', 'orders.placed', false],
    ['#', 'anything.at.all', true],
    ['#.eu', 'order.placed.eu', true],
    ['#.eu', 'order.placed.us', false],
    ['order.#.eu', 'order.eu', true],
    ['order.#.eu', 'order.placed.paid.eu', true],
    ['order.*.eu', 'order.eu', false],
    ['a.#.#.b', 'a.b', true],
  ])('%s against %s → %s', (pattern, topic, expected) => {
    expect(topicMatches(pattern, topic)).toBe(expected);
  });

  it.each([['order.placed'], ['order.*'], ['#'], ['a:b.c-d_e.#']])('accepts %s', (pattern) => {
    expect(validateTopicPattern(pattern)).toBeUndefined();
  });

  it.each([[''], ['order..placed'], ['order.pl*ced'], ['order placed'], ['x'.repeat(129)], [42]])(
    'rejects %p',
    (pattern) => {
      expect(validateTopicPattern(pattern)).toMatch(/topic pattern|segment/);
    },
  );
});
