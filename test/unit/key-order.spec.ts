import { OutboxConfigurationError } from '../../lib/errors/outbox.errors';
import { KeyOrder, resolveOrdering } from '../../lib/ordering/key-order';

describe('resolveOrdering', () => {
  it('orders nothing without the option, and blocks a key behind its dead head by default', () => {
    expect(resolveOrdering(undefined)).toEqual([]);
    expect(resolveOrdering([{ topic: 'order.*' }, { topic: 'stock.#', deadHead: 'skip' }])).toEqual([
      { topic: 'order.*', deadHead: 'block', acknowledge: 'event' },
      { topic: 'stock.#', deadHead: 'skip', acknowledge: 'event' },
    ]);
  });

  it('acknowledges each event by default, and a run where an entry asks', () => {
    const order = new KeyOrder(resolveOrdering([{ topic: 'stock.#', acknowledge: 'run' }, { topic: 'order.*' }]));
    expect(['stock.moved', 'order.placed', 'payment.paid'].map((t) => order.acknowledgesByRun(t))).toEqual([
      true,
      false,
      false,
    ]);
  });

  it.each([
    ['a single entry, not an array', { topic: 'order.*' }, 'ordering'],
    ['an entry that is not an object', ['order.*'], 'ordering[0]'],
    ['a pattern with an empty segment', [{ topic: 'order..placed' }], 'ordering[0].topic'],
    ['no pattern', [{ deadHead: 'skip' }], 'ordering[0].topic'],
    ['an unknown dead-head policy', [{ topic: 'a' }, { topic: 'b', deadHead: 'drop' }], 'ordering[1].deadHead'],
    ['an unknown key', [{ topic: 'a', key: 'id' }], 'ordering[0].key'],
    ['an unknown acknowledge mode', [{ topic: 'a', acknowledge: 'batch' }], 'ordering[0].acknowledge'],
  ])('refuses %s, naming where', (_, value, option) => {
    const error = (() => {
      try {
        resolveOrdering(value);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect((error as Error).message).toContain(option);
  });
});

describe('KeyOrder', () => {
  const order = new KeyOrder(
    resolveOrdering([
      { topic: 'order.placed', deadHead: 'skip' },
      { topic: 'order.*' },
      { topic: 'stock.#', deadHead: 'skip' },
    ]),
  );

  it('is enabled by any entry, and by none without', () => {
    expect(order.enabled).toBe(true);
    expect(new KeyOrder([]).enabled).toBe(false);
    expect(new KeyOrder([]).orders('order.placed', 'k')).toBe(false);
  });

  it('orders an event of a matching topic that has a key; no key, or no entry, is unordered', () => {
    expect(order.orders('order.paid', 'o-1')).toBe(true);
    expect(order.orders('stock.a.b', 'sku-1')).toBe(true);
    expect(order.orders('order.paid', null)).toBe(false);
    expect(order.orders('payment.paid', 'o-1')).toBe(false);
    expect(order.orders('order.paid.late', 'o-1')).toBe(false);
  });

  it('takes the dead-head policy of the first entry that matches', () => {
    expect(order.of('order.placed')).toEqual({ topic: 'order.placed', deadHead: 'skip', acknowledge: 'event' });
    expect(order.of('order.paid')).toEqual({ topic: 'order.*', deadHead: 'block', acknowledge: 'event' });
    expect(order.of('payment.paid')).toBeUndefined();
    expect(['order.placed', 'order.paid', 'stock', 'payment.paid'].map((t) => order.skipsDeadHead(t))).toEqual([
      true,
      false,
      true,
      false,
    ]);
  });

  it('answers the same for a topic seen before, also once its memory of topics was cleared', () => {
    const fresh = new KeyOrder(resolveOrdering([{ topic: 'order.*', deadHead: 'skip' }]));
    const find = jest.spyOn(fresh.rules, 'find');
    expect(fresh.of('order.paid')).toBeDefined();
    expect(fresh.of('order.paid')).toBeDefined();
    expect(fresh.of('payment.paid')).toBeUndefined();
    expect(fresh.of('payment.paid')).toBeUndefined();
    // Each topic matched against the entries once, a topic no entry orders too.
    expect(find).toHaveBeenCalledTimes(2);
    // Past 10,000 topics it starts again, and still answers right.
    for (let n = 0; n < 10_000; n++) fresh.of(`other.${n}`);
    expect(fresh.skipsDeadHead('order.paid')).toBe(true);
    expect(fresh.orders('payment.paid', 'k')).toBe(false);
  });
});
