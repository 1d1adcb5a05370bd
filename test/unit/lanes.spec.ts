import { Lanes } from '../../lib/delivery/lanes';

/** Resolves once every promise already settled has run its callbacks. */
const settled = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('Lanes', () => {
  it('gives free lanes at once, and counts what is free', () => {
    const lanes = new Lanes(3, () => undefined);
    expect(lanes.take()).toBeUndefined();
    expect(lanes.take()).toBeUndefined();
    expect(lanes.free).toBe(1);
  });

  it('makes a request wait when every lane is busy, and hands it the first lane given back', async () => {
    const lanes = new Lanes(1, () => undefined);
    expect(lanes.take()).toBeUndefined();
    let granted = false;
    void lanes.take()!.then(() => (granted = true));
    await settled();
    expect(granted).toBe(false);
    lanes.give();
    await settled();
    expect(granted).toBe(true);
    expect(lanes.free).toBe(0); // the lane went to the waiting request, not back to the pool
  });

  it('serves waiting requests first come first served, and never lets a later one pass an earlier whole request', async () => {
    const lanes = new Lanes(2, () => undefined);
    expect(lanes.take()).toBeUndefined();
    const order: string[] = [];
    void lanes.take(true)!.then(() => order.push('whole'));
    // One lane is free, but a whole request asked first: this one waits behind it.
    const single = lanes.take();
    expect(single).toBeInstanceOf(Promise);
    void single!.then(() => order.push('single'));
    await settled();
    expect(order).toEqual([]);

    lanes.give();
    await settled();
    expect(order).toEqual(['whole']);
    expect(lanes.free).toBe(0);

    lanes.give(true);
    await settled();
    expect(order).toEqual(['whole', 'single']);
    expect(lanes.free).toBe(1);
  });

  it('hands several waiting requests their lanes from one whole give-back', async () => {
    const lanes = new Lanes(3, () => undefined);
    expect(lanes.take(true)).toBeUndefined();
    let granted = 0;
    for (let i = 0; i < 4; i++) void lanes.take()!.then(() => granted++);
    lanes.give(true);
    await settled();
    expect(granted).toBe(3);
    expect(lanes.free).toBe(0);
  });

  it('calls a request made with whenFree at once when a lane is free, else from the give that hands it one, in turn with those made with take', async () => {
    const lanes = new Lanes(1, () => undefined);
    const order: string[] = [];
    lanes.whenFree(() => order.push('first'));
    expect(order).toEqual(['first']);
    expect(lanes.free).toBe(0);

    void lanes.take(true)!.then(() => order.push('whole'));
    lanes.whenFree(() => order.push('second'));
    expect(order).toEqual(['first']);

    lanes.give();
    await settled();
    expect(order).toEqual(['first', 'whole']);
    lanes.give(true);
    // Called by the give itself, before it returns: no promise in between.
    expect(order).toEqual(['first', 'whole', 'second']);
    expect(lanes.free).toBe(0);
  });

  it('tells its owner every time a lane is given back', () => {
    const given = jest.fn();
    const lanes = new Lanes(2, given);
    expect(lanes.take()).toBeUndefined();
    expect(lanes.take()).toBeUndefined();
    lanes.give();
    lanes.give();
    expect(given).toHaveBeenCalledTimes(2);
  });
});
