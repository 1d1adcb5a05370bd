/**
 * What a narrower MariaDB row would buy (issue 15): 50,000 events drained by one client in batches of
 * 500 on the bare mysql2 driver — the claim (locking read and update, one READ COMMITTED transaction)
 * and the acknowledgement — with the server's CPU time read from /proc, in three shapes:
 *
 * - `library`: the library's table (all schema versions) and its own claim and acknowledgement;
 * - `lean`: the library's table and locking read, then an update of the lease columns alone (what a
 *   row never leased before, with attempts left, needs; the library's update also carries the
 *   assignments that record an expired lease or dead-letter, which leave such a row unchanged);
 * - `narrow`: the same columns and the same claim and acknowledgement, with an integer row key the
 *   statements use (the public id kept in a unique column), an integer status;
 * - `relay`: the minimal relay's table and statements (see relay.ts).
 *
 * `npx ts-node --transpile-only -P tsconfig.json bench/mariadb-row.ts` on the machine that runs the
 * server (it reads mariadbd's CPU time); tables `outbox_row_*` in the benchmark's database.
 */
import { execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { MysqlDialect } from '../lib/dialects/mysql/mysql.dialect';
import { outboxTable } from '../lib/dialects/shared/outbox-table';
import type { SqlExecutor, Statement } from '../lib/dialects/shared/outbox-dialect.interface';
import { createTables, dropTables, fill, raw, type Raw } from './raw';
import { createRelayTable, dropRelayTable, fillRelay, relayTable } from './relay';
import { acknowledgeStatement } from '../lib/dialects/shared/outcome-statements';
import { median } from './median';

const EVENTS = 50_000;
const BATCH = 500;
const ROUNDS = 3;
const MAX_ATTEMPTS = 10;
const LEASE_MS = 30_000;

interface Cost {
  /** µs per event */
  claim: number;
  ack: number;
  server: number;
}

const serverPid = execSync('pgrep -x mariadbd').toString().trim().split('\n')[0];
/** mariadbd's user + system CPU time so far, in ms (clock ticks of 10 ms). */
function serverCpuMs(): number {
  const fields = readFileSync(`/proc/${serverPid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function drain<R>(claim: () => Promise<R[]>, ack: (rows: R[]) => Promise<void>): Promise<Cost> {
  let claiming = 0;
  let acknowledging = 0;
  let events = 0;
  const cpuBefore = serverCpuMs();
  for (;;) {
    let started = performance.now();
    const rows = await claim();
    claiming += performance.now() - started;
    if (rows.length === 0) break;
    events += rows.length;
    started = performance.now();
    await ack(rows);
    acknowledging += performance.now() - started;
  }
  const server = serverCpuMs() - cpuBefore;
  if (events !== EVENTS) throw new Error(`drained ${events} of ${EVENTS}`);
  return { claim: (claiming * 1000) / events, ack: (acknowledging * 1000) / events, server: (server * 1000) / events };
}

const list = (n: number) => Array.from({ length: n }, () => '?').join(', ');

/** The library's table under `name`, with all schema versions, filled with the events to drain. */
async function libraryTable(r: Raw, name: string) {
  await createTables('mariadb', r, name);
  await fill('mariadb', r, name, EVENTS);
  return { name, table: outboxTable(name), dialect: new MysqlDialect() };
}

async function library(r: Raw): Promise<Cost> {
  const { name, table, dialect } = await libraryTable(r, 'outbox_row_library');
  const run = (s: Statement) => r.query(s.sql, s.params);
  const executor: SqlExecutor = {
    run,
    transaction: (work) => r.transaction((query) => work((s) => query(s.sql, s.params))),
  };
  let token = '';
  const cost = await drain(
    () => {
      token = randomUUID();
      return dialect.claim(executor, table, { batchSize: BATCH, token, leaseMs: LEASE_MS, maxAttempts: MAX_ATTEMPTS });
    },
    async (rows) =>
      void (await run(
        acknowledgeStatement(
          dialect.flavor,
          table,
          rows.map((row) => String(row.id)),
          token,
        ),
      )),
  );
  await dropTables('mariadb', r, name);
  return cost;
}

/** The library's table and locking read; an update of the lease columns alone, as every fresh row needs. */
async function lean(r: Raw): Promise<Cost> {
  const { name, table, dialect } = await libraryTable(r, 'outbox_row_lean');
  let token = '';
  const cost = await drain(
    () =>
      r.transaction(async (query) => {
        token = randomUUID();
        const selection = dialect.claimSelection(table, BATCH);
        const { rows } = await query(selection.sql, selection.params);
        if (rows.length === 0) return rows;
        const { affected } = await query(
          `UPDATE \`${name}\` SET \`claimed_at\` = UTC_TIMESTAMP(6), \`claim_token\` = ?, ` +
            `\`available_at\` = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND), \`attempts\` = \`attempts\` + 1 ` +
            `WHERE \`id\` IN (${list(rows.length)}) AND \`status\` = 'pending' AND \`available_at\` <= UTC_TIMESTAMP(6)`,
          [token, LEASE_MS * 1000, ...rows.map((row) => row.id)],
        );
        if (affected !== rows.length) throw new Error(`claimed ${affected} of ${rows.length}`);
        return rows;
      }),
    async (rows) => {
      const { sql, params } = acknowledgeStatement(
        dialect.flavor,
        table,
        rows.map((row) => String(row.id)),
        token,
      );
      await r.query(sql, params);
    },
  );
  await dropTables('mariadb', r, name);
  return cost;
}

async function narrow(r: Raw): Promise<Cost> {
  const t = '`outbox_row_narrow`';
  await r.query(`DROP TABLE IF EXISTS ${t}`);
  await r.query(`CREATE TABLE ${t} (
    \`seq\` bigint NOT NULL AUTO_INCREMENT, \`id\` char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    \`topic\` varchar(128) NOT NULL, \`key\` varchar(255) NULL, \`dedupe_key\` varchar(255) NULL,
    \`payload\` longtext NOT NULL CHECK (JSON_VALID(\`payload\`)), \`headers\` text NOT NULL, \`status\` tinyint NOT NULL DEFAULT 0,
    \`attempts\` int NOT NULL DEFAULT 0, \`available_at\` datetime(6) NOT NULL, \`claim_token\` char(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
    \`completed_handlers\` text NOT NULL, \`last_error\` text NULL, \`created_at\` datetime(6) NOT NULL, \`processed_at\` datetime(6) NULL,
    \`expired_attempts\` int NOT NULL DEFAULT 0, \`last_expired_attempt\` int NULL, \`note\` text NULL, \`claimed_at\` datetime(6) NULL,
    \`attempt_log\` text NULL, \`redrive_count\` int NOT NULL DEFAULT 0,
    PRIMARY KEY (\`seq\`), UNIQUE KEY (\`id\`), UNIQUE KEY (\`dedupe_key\`), KEY \`claim\` (\`status\`, \`available_at\`, \`seq\`),
    KEY \`retention\` (\`status\`, \`processed_at\`)
  ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`);
  for (let done = 0; done < EVENTS; done += 10_000) {
    await r.query(
      `INSERT INTO ${t} (\`id\`, \`topic\`, \`payload\`, \`headers\`, \`available_at\`, \`completed_handlers\`, \`created_at\`)
       SELECT UUID(), 'bench.event', '{"n":1}', '{}', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, '[]', UTC_TIMESTAMP(6) FROM seq_1_to_10000`,
    );
  }
  await r.query(`ANALYZE TABLE ${t}`);
  const columns =
    '`seq`, `id`, `topic`, `key`, `payload`, `headers`, `status`, `attempts`, `completed_handlers`, `last_error`, `note`, `last_expired_attempt`, `created_at`, `claim_token`';
  const spent = '`attempts` >= ?';
  let token = '';
  const cost = await drain(
    () =>
      r.transaction(async (query) => {
        token = randomUUID();
        const { rows } = await query(
          `SELECT ${columns} FROM ${t} WHERE \`status\` = 0 AND \`available_at\` <= UTC_TIMESTAMP(6) ORDER BY \`available_at\`, \`seq\` LIMIT ? FOR UPDATE SKIP LOCKED`,
          [BATCH],
        );
        if (rows.length === 0) return rows;
        const { affected } = await query(
          `UPDATE ${t} SET
            \`attempt_log\` = IF(\`claim_token\` IS NOT NULL, JSON_ARRAY_APPEND(COALESCE(\`attempt_log\`, '[]'), '$', 'expired'), \`attempt_log\`),
            \`claimed_at\` = IF(${spent}, \`claimed_at\`, UTC_TIMESTAMP(6)),
            \`note\` = CASE WHEN \`claim_token\` IS NOT NULL THEN CONCAT('attempt ', \`attempts\`, ' of ', ?, ' expired')
              WHEN ${spent} AND \`last_error\` IS NULL THEN CONCAT('attempt ', \`attempts\`, ' of ', ?, ' no outcome') ELSE \`note\` END,
            \`expired_attempts\` = \`expired_attempts\` + IF(\`claim_token\` IS NOT NULL, 1, 0),
            \`last_expired_attempt\` = IF(\`claim_token\` IS NOT NULL, \`attempts\`, \`last_expired_attempt\`),
            \`claim_token\` = IF(${spent}, NULL, ?),
            \`available_at\` = IF(${spent}, \`available_at\`, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)),
            \`status\` = IF(${spent}, 2, 0),
            \`processed_at\` = IF(${spent}, UTC_TIMESTAMP(6), NULL),
            \`attempts\` = IF(${spent}, \`attempts\`, \`attempts\` + 1)
          WHERE \`seq\` IN (${list(rows.length)}) AND \`status\` = 0 AND \`available_at\` <= UTC_TIMESTAMP(6)`,
          [
            ...Array.from({ length: 5 }, () => MAX_ATTEMPTS),
            token,
            MAX_ATTEMPTS,
            LEASE_MS * 1000,
            MAX_ATTEMPTS,
            MAX_ATTEMPTS,
            MAX_ATTEMPTS,
            ...rows.map((row) => row.seq),
          ],
        );
        if (affected !== rows.length) throw new Error(`claimed ${affected} of ${rows.length}`);
        return rows;
      }),
    async (rows) => {
      await r.query(
        `UPDATE ${t} FORCE INDEX (PRIMARY) SET \`status\` = 1, \`claim_token\` = NULL, \`processed_at\` = UTC_TIMESTAMP(6) ` +
          `WHERE \`seq\` IN (${list(rows.length)}) AND \`status\` = 0 AND \`claim_token\` = ? AND \`available_at\` > UTC_TIMESTAMP(6)`,
        [...rows.map((row) => row.seq), token],
      );
    },
  );
  await r.query(`DROP TABLE ${t}`);
  return cost;
}

async function relay(r: Raw): Promise<Cost> {
  const name = 'outbox_row';
  await createRelayTable('mariadb', r, name);
  await fillRelay('mariadb', r, name, EVENTS);
  const t = `\`${relayTable(name)}\``;
  const cost = await drain(
    () =>
      r.transaction(async (query) => {
        const { rows } = await query(
          `SELECT \`id\`, \`payload\` FROM ${t} WHERE \`status\` = 0 ORDER BY \`id\` LIMIT ? FOR UPDATE SKIP LOCKED`,
          [BATCH],
        );
        if (rows.length)
          await query(
            `UPDATE ${t} SET \`status\` = 1 WHERE \`id\` IN (${list(rows.length)})`,
            rows.map((row) => row.id),
          );
        return rows;
      }),
    async (rows) =>
      void (await r.query(
        `UPDATE ${t} SET \`status\` = 2 WHERE \`id\` IN (${list(rows.length)})`,
        rows.map((row) => row.id),
      )),
  );
  await dropRelayTable('mariadb', r, name);
  return cost;
}

async function main(): Promise<void> {
  const r = await raw('mariadb', 1);
  const shapes: Array<[string, (r: Raw) => Promise<Cost>]> = [
    ['library', library],
    ['lean', lean],
    ['narrow', narrow],
    ['relay', relay],
  ];
  const costs = new Map<string, Cost[]>(shapes.map(([name]) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of shapes) costs.get(name)!.push(await run(r));
  }
  await r.close();
  console.log(`MariaDB, ${EVENTS} events, batch ${BATCH}, one client, median of ${ROUNDS} rounds, µs per event:`);
  for (const [name, runs] of costs) {
    const m = (pick: (c: Cost) => number) => median(runs.map(pick)).toFixed(1);
    console.log(
      `${name.padEnd(8)} claim ${m((c) => c.claim)}  acknowledge ${m((c) => c.ack)}  both ${m((c) => c.claim + c.ack)}  server CPU ${m((c) => c.server)}`,
    );
  }
}

void main();
