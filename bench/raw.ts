import { randomUUID } from 'node:crypto';
import { dialectForType } from '../lib/dialects/dialect-for-type';
import { outboxTable } from '../lib/dialects/shared/outbox-table';
import { OUTBOX_SCHEMA_VERSIONS } from '../lib/schema/outbox-migrations';
import { MARIADB_URL, PG_URL, SQLITE_FILE, type Db } from './env';

/** Hand-written SQL with the bare drivers: the baseline every figure is compared with. */
export interface Raw {
  /** `insertId`: MariaDB's, of a write that set one (`LAST_INSERT_ID(expr)`). */
  query(
    sql: string,
    params?: unknown[],
  ): Promise<{ rows: Record<string, unknown>[]; affected: number; insertId?: number }>;
  transaction<T>(work: (query: Raw['query']) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export async function raw(db: Db, pool = 4): Promise<Raw> {
  if (db === 'postgres') {
    const { Pool } = await import('pg');
    const p = new Pool({ connectionString: PG_URL, max: pool });
    const run =
      (q: { query: (sql: string, params: unknown[]) => Promise<import('pg').QueryResult> }) =>
      async (sql: string, params: unknown[] = []) => {
        const r = await q.query(sql, params);
        return { rows: r.rows, affected: r.rowCount ?? 0 };
      };
    return {
      query: run(p),
      transaction: async (work) => {
        const client = await p.connect();
        try {
          await client.query('BEGIN');
          const result = await work(run(client));
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        } finally {
          client.release();
        }
      },
      close: () => p.end(),
    };
  }
  if (db === 'mariadb') {
    const mysql = await import('mysql2/promise');
    const p = mysql.createPool({ uri: MARIADB_URL, connectionLimit: pool });
    const run =
      (q: { query: (sql: string, params?: unknown[]) => Promise<unknown> }) =>
      async (sql: string, params: unknown[] = []) => {
        const [r] = (await q.query(sql, params)) as [unknown];
        return Array.isArray(r)
          ? { rows: r as Record<string, unknown>[], affected: 0 }
          : {
              rows: [],
              affected: (r as { affectedRows: number }).affectedRows,
              insertId: (r as { insertId: number }).insertId,
            };
      };
    return {
      query: run(p),
      transaction: async (work) => {
        const c = await p.getConnection();
        try {
          await c.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
          await c.beginTransaction();
          const result = await work(run(c));
          await c.commit();
          return result;
        } catch (error) {
          await c.rollback();
          throw error;
        } finally {
          c.release();
        }
      },
      close: () => p.end(),
    };
  }
  const { default: Database } = await import('better-sqlite3');
  const d = new Database(SQLITE_FILE);
  d.pragma('journal_mode = WAL');
  d.pragma('busy_timeout = 30000');
  // The driver is synchronous: the promise is the interface's, and it rejects with what the driver throws.
  const query = (sql: string, params: unknown[] = []) =>
    new Promise<{ rows: Record<string, unknown>[]; affected: number }>((resolve) => {
      const statement = d.prepare(sql);
      if (statement.reader) resolve({ rows: statement.all(...params) as Record<string, unknown>[], affected: 0 });
      else resolve({ rows: [], affected: statement.run(...params).changes });
    });
  // One connection: concurrent clients take turns, as they do through the library's gate.
  let turn: Promise<unknown> = Promise.resolve();
  return {
    query,
    transaction: (work) => {
      const run = turn.then(async () => {
        d.exec('BEGIN IMMEDIATE');
        try {
          const result = await work(query);
          d.exec('COMMIT');
          return result;
        } catch (error) {
          d.exec('ROLLBACK');
          throw error;
        }
      });
      turn = run.catch(() => undefined);
      return run;
    },
    close: () => {
      d.close();
      return Promise.resolve();
    },
  };
}

const q = (db: Db, name: string) => (db === 'mariadb' ? `\`${name}\`` : `"${name}"`);

export async function createTables(db: Db, r: Raw, table: string): Promise<void> {
  await dropTables(db, r, table);
  const type = db === 'postgres' ? 'postgres' : db === 'mariadb' ? 'mariadb' : 'better-sqlite3';
  const dialect = dialectForType(type);
  // The table as the latest migrations leave it.
  const steps = OUTBOX_SCHEMA_VERSIONS.flatMap((step) => dialect.schema.upgrade(step.version, outboxTable(table)));
  for (const sql of [...dialect.schema.createSchema(outboxTable(table)), ...steps]) await r.query(sql);
  await r.query(
    `CREATE TABLE ${q(db, `${table}_orders`)} (${q(db, 'id')} varchar(36) PRIMARY KEY, ${q(db, 'amount')} integer NOT NULL)`,
  );
}

export async function dropTables(db: Db, r: Raw, table: string): Promise<void> {
  await r.query(`DROP TABLE IF EXISTS ${q(db, table)}`);
  await r.query(`DROP TABLE IF EXISTS ${q(db, `${table}_orders`)}`);
  // Schema version 7's table of ordered keys.
  await r.query(`DROP TABLE IF EXISTS ${q(db, `${table}_keys`)}`);
}

/** Ids of filled rows, counted across calls so that no two are equal. */
let filled = 0;

/**
 * Inserts `count` rows in statements of 100,000. Their ids are time-ordered like the library's UUIDv7
 * (the time of the statement, then a counter), so rows sit in the table in the order they are claimed,
 * as they do when a real application writes them over time; random ids would scatter each claim over
 * the whole table and measure the fill rather than the outbox.
 */
export async function fill(
  db: Db,
  r: Raw,
  table: string,
  count: number,
  status: 'pending' | 'delivered' = 'pending',
  spreadMs = 0,
) {
  for (let done = 0; done < count; done += 100_000) {
    const n = Math.min(100_000, count - done);
    const base = filled;
    filled += n;
    if (db === 'postgres') {
      await r.query(
        `INSERT INTO "${table}" ("id", "topic", "payload", "status", "available_at", "processed_at")
         SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' || lpad(to_hex(${base} + n), 19, '0'))::uuid,
           'bench.event', '{"n":1}'::jsonb, $1::varchar, now() - interval '1 second', CASE WHEN $1::varchar = 'delivered' THEN now() - random() * ${spreadMs} * interval '1 millisecond' END
         FROM generate_series(1, ${n}) AS n`,
        [status],
      );
    } else if (db === 'mariadb') {
      await r.query(
        `INSERT INTO \`${table}\` (\`id\`, \`topic\`, \`payload\`, \`headers\`, \`status\`, \`available_at\`, \`completed_handlers\`, \`created_at\`, \`processed_at\`)
         SELECT LOWER(CONCAT(SUBSTR(h, 1, 8), '-', SUBSTR(h, 9, 4), '-7', SUBSTR(c, 1, 3), '-8', SUBSTR(c, 4, 3), '-', SUBSTR(c, 7, 12))),
           'bench.event', '{"n":1}', '{}', ?, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, '[]', UTC_TIMESTAMP(6), IF(? = 'delivered', UTC_TIMESTAMP(6) - INTERVAL FLOOR(RAND() * ${spreadMs * 1000}) MICROSECOND, NULL)
         FROM (SELECT LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000)), 12, '0') AS h, LPAD(HEX(${base} + seq), 18, '0') AS c FROM seq_1_to_${n}) AS k`,
        [status, status],
      );
    } else {
      // In SQLite || binds tighter than / and %: the offset is parenthesised whole.
      await r.query(
        `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ${n}),
           k AS (SELECT printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)) AS h, printf('%018x', ${base} + n) AS c FROM s)
         INSERT INTO "${table}" ("id", "topic", "payload", "status", "available_at", "processed_at")
         SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(c, 1, 3) || '-8' || substr(c, 4, 3) || '-' || substr(c, 7, 12),
           'bench.event', '{"n":1}', ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds'),
           CASE WHEN ? = 'delivered' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ((abs(random()) % ${Math.max(1, spreadMs)}) / 1000.0) || ' seconds') END FROM k`,
        [status, status],
      );
    }
  }
  if (db !== 'sqlite') await r.query(db === 'postgres' ? `ANALYZE "${table}"` : `ANALYZE TABLE \`${table}\``);
}

/** The raw baseline's enqueue: one business insert and, with `outbox`, one hand-written outbox insert. */
export async function rawEnqueue(db: Db, r: Raw, table: string, outbox: boolean): Promise<void> {
  const id = randomUUID();
  await r.transaction(async (query) => {
    if (db === 'postgres') {
      await query(`INSERT INTO "${table}_orders" ("id", "amount") VALUES ($1, $2)`, [id, 42]);
      if (outbox) {
        await query(
          `INSERT INTO "${table}" ("id", "topic", "payload", "headers", "available_at") VALUES ($1, $2, $3::jsonb, '{}'::jsonb, now())`,
          [randomUUID(), 'bench.event', JSON.stringify({ orderId: id, amount: 42 })],
        );
      }
    } else if (db === 'mariadb') {
      await query(`INSERT INTO \`${table}_orders\` (\`id\`, \`amount\`) VALUES (?, ?)`, [id, 42]);
      if (outbox) {
        await query(
          `INSERT INTO \`${table}\` (\`id\`, \`topic\`, \`payload\`, \`headers\`, \`available_at\`, \`completed_handlers\`, \`created_at\`)
           VALUES (?, ?, ?, '{}', UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6))`,
          [randomUUID(), 'bench.event', JSON.stringify({ orderId: id, amount: 42 })],
        );
      }
    } else {
      await query(`INSERT INTO "${table}_orders" ("id", "amount") VALUES (?, ?)`, [id, 42]);
      if (outbox) {
        await query(
          `INSERT INTO "${table}" ("id", "topic", "payload", "available_at") VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))`,
          [randomUUID(), 'bench.event', JSON.stringify({ orderId: id, amount: 42 })],
        );
      }
    }
  });
}

/**
 * The raw baseline's ordered enqueue: the business insert, the key's row upserted (its next number, and whether the
 * key had no front, read from the same statement: RETURNING, or MariaDB's insert id), and the event inserted with its
 * number, pending as its key's front or waiting behind it — the statements the library runs for one ordered event.
 */
export async function rawOrderedEnqueue(db: Db, r: Raw, table: string, key: string): Promise<void> {
  const id = randomUUID();
  const eventId = randomUUID();
  const payload = JSON.stringify({ orderId: id, amount: 42 });
  await r.transaction(async (query) => {
    if (db === 'mariadb') {
      await query(`INSERT INTO \`${table}_orders\` (\`id\`, \`amount\`) VALUES (?, ?)`, [id, 42]);
      const { insertId = 0 } = await query(
        `INSERT INTO \`${table}_keys\` (\`key\`, \`last_seq\`, \`front_id\`) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE ` +
          '`last_seq` = LAST_INSERT_ID((`last_seq` + VALUES(`last_seq`)) * 2 + (`front_id` IS NULL)) DIV 2, ' +
          '`front_id` = COALESCE(`front_id`, VALUES(`front_id`))',
        [key, eventId],
      );
      const [seq, front] = insertId === 0 ? [1, true] : [Math.floor(insertId / 2), insertId % 2 === 1];
      await query(
        `INSERT INTO \`${table}\` (\`id\`, \`topic\`, \`key\`, \`payload\`, \`headers\`, \`available_at\`, \`completed_handlers\`, \`created_at\`, \`status\`, \`seq\`)
         VALUES (?, ?, ?, ?, '{}', UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6), ?, ?)`,
        [eventId, 'bench.event', key, payload, front ? 'pending' : 'waiting', seq],
      );
      return;
    }
    const pg = db === 'postgres';
    const p = (n: number) => (pg ? `$${n}` : '?');
    await query(`INSERT INTO "${table}_orders" ("id", "amount") VALUES (${p(1)}, ${p(2)})`, [id, 42]);
    const upsert =
      `INSERT INTO "${table}_keys" ${pg ? 'AS k ' : ''}("key", "last_seq", "front_id") VALUES (${p(1)}, 1, ${p(2)}) ` +
      `ON CONFLICT ("key") DO UPDATE SET "last_seq" = ${pg ? 'k.' : ''}"last_seq" + excluded."last_seq", ` +
      `"front_id" = COALESCE(${pg ? 'k.' : ''}"front_id", excluded."front_id") RETURNING "last_seq", "front_id"`;
    const { rows } = await query(pg ? upsert : `WITH unused AS (SELECT 1) ${upsert}`, [key, eventId]);
    const front = String(rows[0].front_id) === eventId;
    await query(
      `INSERT INTO "${table}" ("id", "topic", "key", "payload", ${pg ? '"headers", ' : ''}"available_at", "status", "seq") ` +
        `VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${pg ? "$4::jsonb, '{}'::jsonb, now()" : "?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"}, ${p(5)}, ${p(6)})`,
      [eventId, 'bench.event', key, payload, front ? 'pending' : 'waiting', rows[0].last_seq],
    );
  });
}

/** The raw baseline's drain: claim a batch (SKIP LOCKED where there is one), acknowledge it in one statement. */
export async function rawDrain(
  db: Db,
  r: Raw,
  table: string,
  batch: number,
  onDelivered?: (count: number) => void,
): Promise<number> {
  let delivered = 0;
  for (;;) {
    const token = randomUUID();
    let ids: string[];
    if (db === 'postgres') {
      const { rows } = await r.query(
        `WITH c AS (SELECT "id" FROM "${table}" WHERE "status" = 'pending' AND "available_at" <= now()
                    ORDER BY "available_at", "id" LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE "${table}" o SET "attempts" = o."attempts" + 1, "claim_token" = $2, "available_at" = now() + interval '60 seconds'
         FROM c WHERE o."id" = c."id" RETURNING o."id", o."payload"`,
        [batch, token],
      );
      ids = rows.map((row) => String(row.id));
      if (ids.length) {
        await r.query(
          `UPDATE "${table}" SET "status" = 'delivered', "claim_token" = NULL, "processed_at" = now() WHERE "id" = ANY($1::uuid[]) AND "claim_token" = $2`,
          [ids, token],
        );
      }
    } else if (db === 'mariadb') {
      ids = await r.transaction(async (query) => {
        const { rows } = await query(
          `SELECT \`id\` FROM \`${table}\` WHERE \`status\` = 'pending' AND \`available_at\` <= UTC_TIMESTAMP(6)
           ORDER BY \`available_at\`, \`id\` LIMIT ? FOR UPDATE SKIP LOCKED`,
          [batch],
        );
        const picked = rows.map((row) => String(row.id));
        if (picked.length) {
          const list = picked.map(() => '?').join(', ');
          await query(
            `UPDATE \`${table}\` SET \`claim_token\` = ?, \`available_at\` = UTC_TIMESTAMP(6) + INTERVAL 60 SECOND, \`attempts\` = \`attempts\` + 1 WHERE \`id\` IN (${list})`,
            [token, ...picked],
          );
          await query(`SELECT \`id\`, \`payload\` FROM \`${table}\` WHERE \`id\` IN (${list})`, picked);
        }
        return picked;
      });
      if (ids.length) {
        await r.query(
          `UPDATE \`${table}\` SET \`status\` = 'delivered', \`claim_token\` = NULL, \`processed_at\` = UTC_TIMESTAMP(6) WHERE \`id\` IN (${ids.map(() => '?').join(', ')}) AND \`claim_token\` = ?`,
          [...ids, token],
        );
      }
    } else {
      const { rows } = await r.query(
        `WITH c AS (SELECT "id" FROM "${table}" WHERE "status" = 'pending' AND "available_at" <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                    ORDER BY "available_at", "id" LIMIT ?)
         UPDATE "${table}" SET "attempts" = "attempts" + 1, "claim_token" = ?, "available_at" = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+60 seconds')
         WHERE "id" IN (SELECT "id" FROM c) RETURNING "id", "payload"`,
        [batch, token],
      );
      ids = rows.map((row) => String(row.id));
      if (ids.length) {
        await r.query(
          `UPDATE "${table}" SET "status" = 'delivered', "claim_token" = NULL, "processed_at" = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE "id" IN (${ids.map(() => '?').join(', ')}) AND "claim_token" = ?`,
          [...ids, token],
        );
      }
    }
    if (ids.length === 0) return delivered;
    delivered += ids.length;
    onDelivered?.(delivered);
  }
}
