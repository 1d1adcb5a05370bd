import { uuidv7 } from '../../lib/utils/uuidv7';

describe('uuidv7', () => {
  it('has the RFC 9562 layout: version 7, variant 10', () => {
    const id = uuidv7();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('starts with the Unix time in milliseconds', () => {
    const at = Date.UTC(2026, 10, 30, 12, 0, 0, 123);
    const id = uuidv7(at);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(at);
  });

  it('does not repeat', () => {
    const ids = new Set(Array.from({ length: 20_000 }, () => uuidv7(1_700_000_000_000)));
    expect(ids.size).toBe(20_000);
  });

  it('grows strictly within a process, also within one millisecond and past 4096 ids in it', () => {
    const at = Date.UTC(2026, 11, 1, 6, 0, 0, 0);
    const ids = Array.from({ length: 10_000 }, () => uuidv7(at));
    expect([...ids].sort()).toEqual(ids);
    expect(parseInt(ids[0].replace(/-/g, '').slice(0, 12), 16)).toBe(at);
  });
});
