/**
 * The minimal relay: the second baseline of `npm run bench`, what the databases can do with no outbox
 * semantics at all. Its own narrow table (an integer key, the topic, the JSON payload, a small status),
 * a claim of N rows in one statement (SKIP LOCKED where it exists), the handler called with the parsed
 * payload, one acknowledgement per batch, the bare driver. No leases, no attempts, no fencing, no clock:
 * the distance to it is the price of the library's guarantees plus whatever the library wastes.
 */
import type { Db } from './env';
import type { Raw } from './raw';

export const relayTable = (table: string) => `${table}_relay`;
const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);

export async function createRelayTable(db: Db, r: Raw, table: string): Promise<void> {
  const t = q(db, relayTable(table));
  await r.query(`DROP TABLE IF EXISTS ${t}`);
  if (db === 'postgres') {
    await r.query(
      `CREATE TABLE ${t} ("id" bigserial PRIMARY KEY, "topic" text NOT NULL, "payload" jsonb NOT NULL, "status" smallint NOT NULL DEFAULT 0)`,
    );
    await r.query(`CREATE INDEX ON ${t} ("id") WHERE "status" = 0`);
  } else if (db === 'mariadb') {
    await r.query(
      `CREATE TABLE ${t} (\`id\` bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, \`topic\` varchar(128) NOT NULL, ` +
        '`payload` longtext NOT NULL, `status` tinyint NOT NULL DEFAULT 0, KEY (`status`, `id`)) ENGINE=InnoDB',
    );
  } else {
    await r.query(
      `CREATE TABLE ${t} ("id" INTEGER PRIMARY KEY, "topic" text NOT NULL, "payload" text NOT NULL, "status" integer NOT NULL DEFAULT 0)`,
    );
    await r.query(`CREATE INDEX "${relayTable(table)}_due" ON ${t} ("id") WHERE "status" = 0`);
  }
}

export async function dropRelayTable(db: Db, r: Raw, table: string): Promise<void> {
  await r.query(`DROP TABLE IF EXISTS ${q(db, relayTable(table))}`);
}

export async function fillRelay(db: Db, r: Raw, table: string, count: number): Promise<void> {
  const t = q(db, relayTable(table));
  for (let done = 0; done < count; done += 100_000) {
    const n = Math.min(100_000, count - done);
    if (db === 'postgres') {
      await r.query(
        `INSERT INTO ${t} ("topic", "payload") SELECT 'bench.event', '{"n":1}'::jsonb FROM generate_series(1, ${n})`,
      );
    } else if (db === 'mariadb') {
      await r.query(`INSERT INTO ${t} (\`topic\`, \`payload\`) SELECT 'bench.event', '{"n":1}' FROM seq_1_to_${n}`);
    } else {
      await r.query(
        `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ${n}) ` +
          `INSERT INTO ${t} ("topic", "payload") SELECT 'bench.event', '{"n":1}' FROM s`,
      );
    }
  }
  if (db !== 'sqlite') await r.query(db === 'postgres' ? `ANALYZE ${t}` : `ANALYZE TABLE ${t}`);
}

/** The business insert and the relay's event, in one transaction. */
export async function relayEnqueue(db: Db, r: Raw, table: string, id: string): Promise<void> {
  const payload = JSON.stringify({ orderId: id, amount: 42 });
  await r.transaction(async (query) => {
    if (db === 'postgres') {
      await query(`INSERT INTO "${table}_orders" ("id", "amount") VALUES ($1, $2)`, [id, 42]);
      await query(`INSERT INTO "${relayTable(table)}" ("topic", "payload") VALUES ($1, $2::jsonb)`, [
        'bench.event',
        payload,
      ]);
    } else {
      await query(`INSERT INTO ${q(db, `${table}_orders`)} (${q(db, 'id')}, ${q(db, 'amount')}) VALUES (?, ?)`, [
        id,
        42,
      ]);
      await query(`INSERT INTO ${q(db, relayTable(table))} (${q(db, 'topic')}, ${q(db, 'payload')}) VALUES (?, ?)`, [
        'bench.event',
        payload,
      ]);
    }
  });
}

/** Claims, hands each payload to `handle`, acknowledges per batch, until a claim comes back empty. */
export async function relayDrain(
  db: Db,
  r: Raw,
  table: string,
  batch: number,
  handle: (payload: unknown) => void,
): Promise<number> {
  const t = q(db, relayTable(table));
  let delivered = 0;
  for (;;) {
    let rows: Record<string, unknown>[];
    if (db === 'postgres') {
      ({ rows } = await r.query(
        `UPDATE ${t} SET "status" = 1 WHERE "id" IN (SELECT "id" FROM ${t} WHERE "status" = 0 ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED) ` +
          'RETURNING "id", "payload"',
        [batch],
      ));
    } else if (db === 'mariadb') {
      rows = await r.transaction(async (query) => {
        const picked = (
          await query(
            `SELECT \`id\`, \`payload\` FROM ${t} WHERE \`status\` = 0 ORDER BY \`id\` LIMIT ? FOR UPDATE SKIP LOCKED`,
            [batch],
          )
        ).rows;
        if (picked.length)
          await query(
            `UPDATE ${t} SET \`status\` = 1 WHERE \`id\` IN (${picked.map(() => '?').join(', ')})`,
            picked.map((p) => p.id),
          );
        return picked;
      });
    } else {
      ({ rows } = await r.query(
        `UPDATE ${t} SET "status" = 1 WHERE "id" IN (SELECT "id" FROM ${t} WHERE "status" = 0 ORDER BY "id" LIMIT ?) RETURNING "id", "payload"`,
        [batch],
      ));
    }
    if (rows.length === 0) return delivered;
    const ids: unknown[] = [];
    for (const row of rows) {
      handle(typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload);
      ids.push(row.id);
    }
    if (db === 'postgres') await r.query(`UPDATE ${t} SET "status" = 2 WHERE "id" = ANY($1::bigint[])`, [ids]);
    else
      await r.query(
        `UPDATE ${t} SET ${q(db, 'status')} = 2 WHERE ${q(db, 'id')} IN (${ids.map(() => '?').join(', ')})`,
        ids,
      );
    delivered += rows.length;
  }
}

/** How many relay events were acknowledged exactly once (status 2). */
export async function relayDelivered(db: Db, r: Raw, table: string): Promise<number> {
  const { rows } = await r.query(
    `SELECT count(*) AS ${q(db, 'n')} FROM ${q(db, relayTable(table))} WHERE ${q(db, 'status')} = 2`,
  );
  return Number(rows[0].n);
}
