/**
 * Raw SQL doing the strict rule's durable per-event step on one hot key (issue 41, part 1), on PostgreSQL: the
 * baseline of the library's hot key acknowledged by event. Its own two tables (events, keys), one key, one bare
 * `pg` client. A claim leases the key's next `batch` events in order (one statement per batch, as the library's
 * claim takes a run); then per event, the no-op handler awaited and the step that makes it durable: in one
 * transaction, the key's row locked, the event acknowledged (fenced by the claim's token), the key's front
 * moved to its next waiting event and that one made pending. Two ways to send the step:
 * - `statements`: each statement a round trip (named prepared statements; BEGIN and COMMIT too): 5;
 * - `script`: the whole transaction as one simple-protocol message, values written as literals: 1.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from 'pg';
import { literal } from '../lib/dialects/postgres/postgres-script';
import type { Raw } from './raw';

export type StrictStepSend = 'statements' | 'script';

const KEY = 'hot';

function tables(table: string) {
  return { events: `"${table}_strict"`, keys: `"${table}_strict_keys"` };
}

export async function createStrictStepTables(r: Raw, table: string): Promise<void> {
  const { events, keys } = tables(table);
  await dropStrictStepTables(r, table);
  await r.query(
    `CREATE TABLE ${events} ("id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "key" text NOT NULL, ` +
      `"seq" int NOT NULL, "payload" jsonb NOT NULL, "status" text NOT NULL, "claim_token" uuid, ` +
      '"attempts" int NOT NULL DEFAULT 0, "available_at" timestamptz NOT NULL DEFAULT now(), "processed_at" timestamptz)',
  );
  // The library's key-order index: a key's unfinished events by number.
  await r.query(`CREATE INDEX ON ${events} ("key", "seq") WHERE "status" IN ('pending', 'waiting')`);
  await r.query(`CREATE TABLE ${keys} ("key" text PRIMARY KEY, "last_seq" int NOT NULL, "front_id" bigint)`);
}

export async function dropStrictStepTables(r: Raw, table: string): Promise<void> {
  const { events, keys } = tables(table);
  await r.query(`DROP TABLE IF EXISTS ${events}`);
  await r.query(`DROP TABLE IF EXISTS ${keys}`);
}

/** `count` events of the one key, numbered in order: the first pending (the key's front), the rest waiting. */
export async function fillStrictStep(r: Raw, table: string, count: number): Promise<void> {
  const { events, keys } = tables(table);
  await r.query(`TRUNCATE ${events}, ${keys}`);
  await r.query(
    `INSERT INTO ${events} ("key", "seq", "payload", "status") SELECT '${KEY}', n, '{"n":1}'::jsonb, ` +
      `CASE WHEN n = 1 THEN 'pending' ELSE 'waiting' END FROM generate_series(1, ${count}) AS n`,
  );
  await r.query(
    `INSERT INTO ${keys} ("key", "last_seq", "front_id") SELECT '${KEY}', ${count}, min("id") FROM ${events}`,
  );
  await r.query(`ANALYZE ${events}`);
}

/** How many events were acknowledged, and whether the key's front went past the last one. */
export async function strictStepDelivered(
  r: Raw,
  table: string,
): Promise<{ delivered: number; frontCleared: boolean }> {
  const { events, keys } = tables(table);
  const { rows } = await r.query(`SELECT count(*) AS "n" FROM ${events} WHERE "status" = 'delivered'`);
  const { rows: key } = await r.query(`SELECT "front_id" FROM ${keys} WHERE "key" = '${KEY}'`);
  return { delivered: Number(rows[0].n), frontCleared: key[0].front_id === null };
}

function statements(table: string) {
  const { events, keys } = tables(table);
  const name = (what: string) => `${table}_strict_${what}`;
  return {
    claim: {
      name: name('claim'),
      text:
        `WITH c AS (SELECT "id" FROM ${events} WHERE "key" = $1 AND "status" IN ('pending', 'waiting') ` +
        `ORDER BY "seq" LIMIT $2 FOR UPDATE) UPDATE ${events} AS e SET "claim_token" = $3, "attempts" = e."attempts" + 1, ` +
        `"available_at" = now() + interval '30 seconds' FROM c WHERE e."id" = c."id" RETURNING e."id", e."seq", e."payload"`,
    },
    lock: { name: name('lock'), text: `SELECT "key" FROM ${keys} WHERE "key" = $1 FOR UPDATE` },
    ack: {
      name: name('ack'),
      text:
        `UPDATE ${events} SET "status" = 'delivered', "processed_at" = now(), "claim_token" = NULL ` +
        `WHERE "id" = $1 AND "claim_token" = $2`,
    },
    move: {
      name: name('move'),
      text:
        `WITH moved AS (UPDATE ${keys} AS k SET "front_id" = (SELECT e."id" FROM ${events} e WHERE e."key" = k."key" ` +
        `AND e."status" = 'waiting' ORDER BY e."seq" LIMIT 1) WHERE k."key" = $1 AND k."front_id" = $2 ` +
        `AND NOT EXISTS (SELECT 1 FROM ${events} o WHERE o."id" = k."front_id" AND o."status" IN ('pending', 'waiting')) ` +
        `RETURNING k."front_id") UPDATE ${events} SET "status" = 'pending' WHERE "id" IN (SELECT "front_id" FROM moved) ` +
        `AND "status" = 'waiting'`,
    },
  };
}

/** `text` with its `$n` replaced by the literals of `values` (the statements here quote nothing that holds a `$`). */
function written(text: string, values: unknown[]): string {
  return text.replace(/\$(\d+)/g, (_, n: string) => literal(values[Number(n) - 1]));
}

/**
 * Claims the key's next `batch` events, and per event awaits the handler and makes its step durable; until a
 * claim comes back empty. Returns how many it acknowledged.
 */
export async function strictStepDrain(
  client: Client,
  table: string,
  batch: number,
  send: StrictStepSend,
  handler: (payload: unknown) => Promise<void>,
): Promise<number> {
  const s = statements(table);
  const script = ['BEGIN ISOLATION LEVEL READ COMMITTED', s.lock.text, s.ack.text, s.move.text, 'COMMIT'];
  let delivered = 0;
  for (;;) {
    const token = randomUUID();
    const { rows } = await client.query<{ id: string; seq: number; payload: unknown }>({
      ...s.claim,
      values: [KEY, batch, token],
    });
    if (rows.length === 0) return delivered;
    rows.sort((a, b) => a.seq - b.seq);
    for (const row of rows) {
      await handler(row.payload);
      if (send === 'script') {
        await client.query(
          [
            script[0],
            written(script[1], [KEY]),
            written(script[2], [row.id, token]),
            written(script[3], [KEY, row.id]),
            script[4],
          ].join(';\n'),
        );
      } else {
        await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        await client.query({ ...s.lock, values: [KEY] });
        await client.query({ ...s.ack, values: [row.id, token] });
        await client.query({ ...s.move, values: [KEY, row.id] });
        await client.query('COMMIT');
      }
      delivered++;
    }
  }
}
