/**
 * The leased relay (issue 41, part 3): the third baseline of the drain, on PostgreSQL only. The minimal relay
 * (relay.ts) plus the least a relay needs to survive a crash: a lease and a retry time set at claim, an attempt
 * counted, a processed time written at acknowledgement. Its own table, one claim statement per batch (SKIP
 * LOCKED), the no-op handler awaited per event in sequence, one acknowledgement per batch, named prepared
 * statements on one bare `pg` client per worker process. No fencing token, no dead letters, no concurrent
 * lanes: the distance from the library to it is the price of those plus whatever the library wastes.
 */
import type { Client } from 'pg';
import { PG_URL } from './env';
import type { Raw } from './raw';

export const leaseRelayTable = (table: string) => `${table}_lease_relay`;

/**
 * A literal, not a parameter: the claim's plan then never depends on a bound value, and no event of the bench
 * ever waits that long. The drain never sees a lease run out.
 */
const LEASE = "interval '30 seconds'";

/** A claimed row as node-postgres hands it back: bigint as a string, jsonb already parsed. */
interface Claimed {
  id: string;
  topic: string;
  payload: unknown;
}

/** A handler of the relay: awaited per event, one after another. */
export type LeaseRelayHandler = (payload: unknown) => Promise<void>;

export async function createLeaseRelayTable(r: Raw, table: string): Promise<void> {
  const t = `"${leaseRelayTable(table)}"`;
  await r.query(`DROP TABLE IF EXISTS ${t}`);
  await r.query(
    `CREATE TABLE ${t} ("id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "topic" text NOT NULL, ` +
      `"payload" jsonb NOT NULL, "status" text NOT NULL DEFAULT 'pending', "attempts" int NOT NULL DEFAULT 0, ` +
      '"next_attempt_at" timestamptz NOT NULL DEFAULT now(), "locked_until" timestamptz, "processed_at" timestamptz)',
  );
  // Partial: the claim reads the pending rows only, in the order it claims them.
  await r.query(`CREATE INDEX ON ${t} ("next_attempt_at", "id") WHERE "status" = 'pending'`);
}

export async function dropLeaseRelayTable(r: Raw, table: string): Promise<void> {
  await r.query(`DROP TABLE IF EXISTS "${leaseRelayTable(table)}"`);
}

/** `count` pending events, as fillRelay writes the minimal relay's, then fresh statistics for the claim's plan. */
export async function fillLeaseRelay(r: Raw, table: string, count: number): Promise<void> {
  const t = `"${leaseRelayTable(table)}"`;
  for (let done = 0; done < count; done += 100_000) {
    const n = Math.min(100_000, count - done);
    await r.query(
      `INSERT INTO ${t} ("topic", "payload") SELECT 'bench.event', '{"n":1}'::jsonb FROM generate_series(1, ${n})`,
    );
  }
  await r.query(`ANALYZE ${t}`);
}

/** How many events were acknowledged (status 'done'). */
export async function leaseRelayDelivered(r: Raw, table: string): Promise<number> {
  const { rows } = await r.query(`SELECT count(*) AS "n" FROM "${leaseRelayTable(table)}" WHERE "status" = 'done'`);
  return Number(rows[0].n);
}

/** The worker's one connection: a bare client, no pool, as a hand-written relay process would hold. */
export async function leaseRelayClient(): Promise<Client> {
  const { Client } = await import('pg');
  const client = new Client({ connectionString: PG_URL });
  await client.connect();
  return client;
}

/** The two statements, named: node-postgres prepares each once per connection, then only binds and executes. */
function statements(table: string) {
  const t = `"${leaseRelayTable(table)}"`;
  return {
    claim: {
      name: `${leaseRelayTable(table)}_claim`,
      text:
        `WITH c AS (SELECT "id" FROM ${t} WHERE "status" = 'pending' AND "next_attempt_at" <= now() ` +
        `ORDER BY "next_attempt_at", "id" LIMIT $1 FOR UPDATE SKIP LOCKED) ` +
        `UPDATE ${t} SET "attempts" = ${t}."attempts" + 1, "locked_until" = now() + ${LEASE}, ` +
        `"next_attempt_at" = now() + ${LEASE} FROM c WHERE ${t}."id" = c."id" ` +
        `RETURNING ${t}."id", ${t}."topic", ${t}."payload"`,
    },
    ack: {
      name: `${leaseRelayTable(table)}_ack`,
      text: `UPDATE ${t} SET "status" = 'done', "processed_at" = now(), "locked_until" = NULL WHERE "id" = ANY($1::bigint[])`,
    },
  };
}

/**
 * Claims up to `batch` due events, awaits `handler` on each in turn, acknowledges the batch in one statement;
 * until a claim comes back empty. Returns how many it acknowledged.
 */
export async function leaseRelayDrain(
  client: Client,
  table: string,
  batch: number,
  handler: LeaseRelayHandler,
): Promise<number> {
  const { claim, ack } = statements(table);
  let delivered = 0;
  for (;;) {
    const { rows } = await client.query<Claimed>({ ...claim, values: [batch] });
    if (rows.length === 0) return delivered;
    for (const row of rows) await handler(row.payload);
    await client.query({ ...ack, values: [rows.map((row) => row.id)] });
    delivered += rows.length;
  }
}
