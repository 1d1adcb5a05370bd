import { mysqlKeyOrder } from '../../lib/dialects/mysql/mysql-key-order';

describe('MySQL’s per-key order, reported as insert ids', () => {
  const reservation = { key: 'k', count: 3, firstId: 'first' };
  const { reserveOne, promotedDue } = mysqlKeyOrder;

  it('reads one key’s reservation from its insert id: none is a new row, else the last number and whether the key had no front', () => {
    expect(reserveOne!.read(reservation, 0)).toEqual({ key: 'k', last_seq: 3, front_id: 'first' });
    // (last_seq + count) * 2 + (front_id IS NULL), as the upsert reports it.
    expect(reserveOne!.read(reservation, 10 * 2 + 1)).toEqual({ key: 'k', last_seq: 10, front_id: 'first' });
    expect(reserveOne!.read(reservation, 10 * 2)).toEqual({ key: 'k', last_seq: 10, front_id: null });
  });

  it('assigns the new last number before the front, so it reads whether the key had one before this publish', () => {
    const upsert = reserveOne!.upsert;
    expect(upsert.indexOf('`last_seq` = LAST_INSERT_ID(')).toBeLessThan(upsert.indexOf('`front_id` = COALESCE('));
  });

  it('reads from the promotion’s insert id whether it made an event due: a number, never 0, when one was', () => {
    expect(promotedDue!.read(0)).toBe(false);
    expect(promotedDue!.read(7)).toBe(true);
  });
});
