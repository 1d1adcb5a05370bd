// The three databases of the compat run, reached two ways: TypeORM options for the application, and a
// raw connection of the test's own, so checks never go through the code under test.
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';

export const BACKENDS = ['postgres', 'mariadb', 'better-sqlite3'];

const postgresUrl = process.env.OUTBOX_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const mariadbUrl = process.env.OUTBOX_TEST_MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test';

export const uniqueName = (prefix) => `${prefix}_${randomBytes(5).toString('hex')}`;

/** A fresh SQLite file in the temp folder; `removeSqliteFile` deletes it with its WAL companions. */
export function sqliteFile() {
  const dir = join(tmpdir(), 'nestjs-typeorm-outbox-compat');
  mkdirSync(dir, { recursive: true });
  return join(dir, `${uniqueName('db')}.sqlite`);
}

export function removeSqliteFile(path) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${path}${suffix}`, { force: true });
}

export function typeOrmOptions(backend, sqlitePath) {
  switch (backend) {
    case 'postgres':
      return { type: 'postgres', url: postgresUrl };
    case 'mariadb':
      return { type: 'mariadb', url: mariadbUrl };
    case 'better-sqlite3':
      return { type: 'better-sqlite3', database: sqlitePath, enableWAL: true, timeout: 10_000 };
    default:
      throw new Error(`unknown backend ${backend}`);
  }
}

/**
 * Test SQL is written SQLite-style ("quoted" names, ? placeholders) and turned into the backend's
 * dialect here.
 */
export function dialectSql(backend, text) {
  if (backend === 'mariadb') return text.replace(/"([A-Za-z0-9_]+)"/g, '`$1`');
  if (backend === 'postgres') {
    let n = 0;
    return text.replace(/\?/g, () => `$${++n}`);
  }
  return text;
}

/** `{ query(sql, params) → rows, close() }` on a connection of its own. */
export async function openRaw(backend, sqlitePath) {
  if (backend === 'postgres') {
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    return {
      query: async (text, params = []) => (await client.query(dialectSql(backend, text), params)).rows,
      close: () => client.end(),
    };
  }
  if (backend === 'mariadb') {
    const connection = await mysql.createConnection({ uri: mariadbUrl, dateStrings: true });
    return {
      query: async (text, params = []) => (await connection.query(dialectSql(backend, text), params))[0],
      close: () => connection.end(),
    };
  }
  const db = new Database(sqlitePath, { timeout: 10_000 });
  return {
    query: async (text, params = []) => {
      const statement = db.prepare(text);
      return statement.reader ? statement.all(...params) : (statement.run(...params), []);
    },
    close: async () => db.close(),
  };
}
