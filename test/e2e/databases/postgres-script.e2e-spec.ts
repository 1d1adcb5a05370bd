import { Client } from 'pg';
import { QueryFailedError } from 'typeorm';
import { inlined } from '../../../lib/dialects/postgres/postgres-script';
import { describeOn } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** Values whose literal is easy to get wrong: quotes, backslashes, braces and commas (arrays), Unicode, signs. */
const TEXTS = ["it's", 'back\\slash', "both \\' at once", '{a,b}', 'with "quotes"', 'ünïcødé ✓', '', ' ', 'NULL'];
const NUMBERS = [0, -1, 42, 1.5, 2 ** 53 - 1];

describeOn('postgres')('statements sent as one script on PostgreSQL', () => {
  let app: TestApp;
  beforeAll(async () => {
    // No wake-up channel: its NOTIFY, sent a moment after a commit, would count among the round trips.
    app = await createTestApp({ backend: 'postgres', outbox: { ordering: [{ topic: 'order.#' }], wakeUp: false } });
    await app.raw.query('CREATE TABLE IF NOT EXISTS "script_probe" ("n" int NOT NULL)');
  });
  afterAll(async () => {
    await app.raw.query('DROP TABLE IF EXISTS "script_probe"');
    await app.dispose();
  });

  /** Each value read back as the server reads it: once bound as a parameter, once written as a literal. */
  async function readBoth(cast: string, values: unknown[], conforming: 'on' | 'off') {
    const runner = app.dataSource.createQueryRunner();
    try {
      await runner.query(`SET standard_conforming_strings = ${conforming}`);
      const bound: unknown[] = [];
      const written: unknown[] = [];
      for (const value of values) {
        const statement = { sql: `SELECT $1::${cast} AS "v"`, params: [value] };
        const [fromBound] = (await runner.query(statement.sql, statement.params)) as Array<{ v: unknown }>;
        const [fromWritten] = (await runner.query(inlined(statement))) as Array<{ v: unknown }>;
        bound.push(fromBound.v);
        written.push(fromWritten.v);
      }
      return { bound, written };
    } finally {
      await runner.query('RESET standard_conforming_strings');
      await runner.release();
    }
  }

  it.each(['on', 'off'] as const)(
    'writes each value as a literal the server reads as the same value bound (standard_conforming_strings %s)',
    async (conforming) => {
      const texts = await readBoth('text', TEXTS, conforming);
      expect(texts.written).toEqual(TEXTS);
      expect(texts.written).toEqual(texts.bound);
      const numbers = await readBoth('float8', NUMBERS, conforming);
      expect(numbers.written).toEqual(NUMBERS);
      const arrays = await readBoth('text[]', [TEXTS, [], ['one', null, 'two']], conforming);
      expect(arrays.written).toEqual(arrays.bound);
      expect(arrays.written).toEqual([TEXTS, [], ['one', null, 'two']]);
      const flags = await readBoth('boolean', [true, false, null], conforming);
      expect(flags.written).toEqual([true, false, null]);
    },
  );

  it('leaves a placeholder in quotes alone, and refuses one with no value', () => {
    expect(inlined({ sql: `SELECT '$1' AS "$1", $1 AS "v"`, params: ["o'k"] })).toBe(
      `SELECT '$1' AS "$1", 'o''k' AS "v"`,
    );
    expect(() => inlined({ sql: 'SELECT $2', params: [1] })).toThrow(/placeholder \$2 but 1 values/);
  });

  it('rolls the whole script back when a statement fails, and the connection serves the next one', async () => {
    const { script } = app.store.executor;
    const failing = script!([
      { sql: 'INSERT INTO "script_probe" ("n") VALUES ($1)', params: [1] },
      { sql: 'SELECT 1 / $1::int', params: [0] },
    ]);
    await expect(failing).rejects.toBeInstanceOf(QueryFailedError);
    await expect(failing).rejects.toHaveProperty('message', expect.stringMatching(/division by zero/));
    // The pool hands out the client it got back last: had the script's transaction stayed open, aborted,
    // every statement on it would now be refused.
    const [inserted, count] = await script!([
      { sql: 'INSERT INTO "script_probe" ("n") VALUES ($1)', params: [2] },
      { sql: 'SELECT array_agg("n" ORDER BY "n") AS "ns" FROM "script_probe"', params: [] },
    ]);
    expect(inserted.affected).toBe(1);
    expect(count.rows).toEqual([{ ns: [2] }]);
  });

  it('finishes an event of an ordered key in one round trip: outcome, front moved, next made pending; a refused outcome moves nothing', async () => {
    const key = `one-trip-${Date.now()}`;
    await app.txHost.withTransaction(async () => {
      for (const n of [1, 2, 3]) await app.outbox.publish('order.placed', { n }, { key });
    });
    const claim = await app.store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 5, lanes: 10 });
    const [first, second] = [...claim.events, ...[...claim.runs.values()].flat()]
      .filter((e) => e.key === key)
      .sort((a, b) => a.seq! - b.seq!);
    const others = claim.events.filter((e) => e.key !== key).map((e) => e.id);
    await app.store.releaseMany(others, claim.token, true);

    const statusOf = async () =>
      (
        await app.raw.query<{ status: string }>(`SELECT "status" FROM "${app.table}" WHERE "key" = $1 ORDER BY "seq"`, [
          key,
        ])
      ).map((row: { status: string }) => row.status);
    const frontOf = async () =>
      (
        await app.raw.query<{ front_id: string }>(`SELECT "front_id" FROM "${app.table}_keys" WHERE "key" = $1`, [key])
      )[0].front_id;

    const sent = jest.spyOn(Client.prototype, 'query');
    try {
      // Another token: the fenced outcome is refused, and the move finds its event unfinished.
      expect(await app.store.acknowledge([first.id], '00000000-0000-4000-8000-000000000000', [key])).toBe(0);
      expect(sent).toHaveBeenCalledTimes(1);
      expect(await frontOf()).toBe(first.id);
      sent.mockClear();
      expect(await app.store.acknowledge([first.id], claim.token, [key])).toBe(1);
      expect(sent).toHaveBeenCalledTimes(1);
      expect(String(sent.mock.calls[0][0])).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED;/);
    } finally {
      sent.mockRestore();
    }
    expect(await frontOf()).toBe(second.id);
    // The second was taken by the claim's run: pending now, as the key's front.
    expect(await statusOf()).toEqual(['delivered', 'pending', 'waiting']);
  });
});
