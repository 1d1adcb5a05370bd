import type { FailureUpdate, OutboxDialect, SqlExecutor, Statement } from '../shared/outbox-dialect.interface';
import {
  CLAIMED_COLUMNS,
  decodeRow,
  driverErrno,
  INSERT_COLUMNS,
  insertParams,
  LEASE_EXPIRED,
  NO_OUTCOME,
} from '../shared/dialect.util';
import { onDedupeConflict, requireVersion } from '../shared/dialect.util';
import { indexesOf, purgeBatch, purgeSelection } from './mysql-retention';
import { mysqlSchema } from './mysql-schema';
import { COLUMNS, NOW, q, qt, utcDatetime, utcText } from './mysql-sql';
import { mysqlFlavor } from './mysql-flavor';
import { json } from './mysql-history';
import { appendAttempt, LOGGED_ERROR_LENGTH } from '../shared/attempt-log';
import type { ValidatedEvent } from '../../interfaces/validated-event.interface';
import type { OutboxTable } from '../shared/outbox-table';

/**
 * What the claim's locking read returns: the columns of `ClaimedEvent` as they were before the claim,
 * and the claim token, from which `afterClaim` derives them as the claim's update leaves them.
 */
const PICKED = [...CLAIMED_COLUMNS.map(q), `${utcText(q('created_at'))} AS ${q('created_at')}`, q('claim_token')].join(
  ', ',
);

const NOW_PLUS = 'DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)';
/**
 * The table for a fenced write by id. Left to itself the optimizer may read those rows through the
 * claim index (its leading `status` matches the fence), and under REPEATABLE READ — the session default these
 * single statements run in — that range scan takes next-key locks on pending rows it does not change,
 * including producers' uncommitted inserts: a deadlock with the application's own transaction (seen in
 * the fault suite's starved-pool scenario). By primary key it locks exactly the rows it changes.
 */
const byId = (table: OutboxTable) => `${qt(table)} FORCE INDEX (PRIMARY)`;

/**
 * The claim still holds the event: pending, with its token. Only another claim replaces the token, so
 * a lease that ran out while nobody claimed the event (the worker waited for a connection, or stalled)
 * does not void the outcome: the attempt ran once, and recording it is what keeps it from running again.
 */
const HELD = "`status` = 'pending' AND `claim_token` = ?";

/**
 * MySQL 8.0.17+ and MariaDB 10.6+ (InnoDB, through mysql2): `DATETIME(6)` in UTC compared with
 * `UTC_TIMESTAMP(6)`; JSON kept as utf8mb4 text, so it comes back byte for byte; a binary collation so
 * topics and dedupe keys compare exactly. No `UPDATE … RETURNING`: the claim selects `FOR UPDATE SKIP
 * LOCKED` and updates the rows it locked in one READ COMMITTED transaction.
 */
export class MysqlDialect implements OutboxDialect {
  readonly name = 'mysql';
  readonly maxParameters = 65_535;
  readonly flavor = mysqlFlavor;
  readonly transactionIsolation = 'READ COMMITTED';

  /** The server's max_allowed_packet: a bigger INSERT fails with ER_NET_PACKET_TOO_LARGE. */
  maxStatementBytes: number | undefined;

  async verifyServer(executor: SqlExecutor): Promise<void> {
    const { rows } = await executor.run({
      sql: 'SELECT VERSION() AS `version`, @@max_allowed_packet AS `max_packet`',
      params: [],
    });
    this.maxStatementBytes = Number(rows[0]?.max_packet) || undefined;
    const version = (rows[0]?.version as string | undefined) ?? '';
    if (/mariadb/i.test(version)) requireVersion('MariaDB', version, '10.6');
    else requireVersion('MySQL', version, '8.0.17');
  }

  // The table's versions and the start-up checks: mysql-schema.ts.
  readonly tableExists = mysqlSchema.tableExists;
  readonly relocate = mysqlSchema.relocate;
  readonly createSchema = mysqlSchema.createSchema;
  readonly dropSchema = mysqlSchema.dropSchema;
  readonly upgrade = mysqlSchema.upgrade;
  readonly downgrade = mysqlSchema.downgrade;
  readonly columns = mysqlSchema.columns;

  isTransient(error: unknown): boolean {
    // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
    const errno = driverErrno(error);
    return errno === 1213 || errno === 1205;
  }

  insert(table: OutboxTable, rows: Array<{ id: string; event: ValidatedEvent }>): Statement {
    const params: unknown[] = [];
    const values = rows.map(({ id, event }) => {
      params.push(...insertParams(id, event, utcDatetime, (ms) => ms * 1000));
      return `(?, ?, ?, ?, ?, ?, COALESCE(?, ${NOW_PLUS}), '[]', ${NOW})`;
    });
    return {
      sql:
        `INSERT INTO ${qt(table)} (${[...INSERT_COLUMNS, 'completed_handlers', 'created_at'].map(q).join(', ')}) ` +
        `VALUES ${values.join(', ')}` +
        // A repeated dedupe key leaves the first row as it was; the store then compares contents.
        onDedupeConflict(rows, ' ON DUPLICATE KEY UPDATE `id` = `id`'),
      params,
    };
  }

  selectByDedupeKeys(table: OutboxTable, keys: string[], latest = false): Statement {
    return {
      // Under REPEATABLE READ a plain SELECT reads the transaction's snapshot, which cannot hold a row
      // committed by another transaction after it began; a locking read sees the latest version.
      sql:
        `SELECT ${COLUMNS} FROM ${qt(table)} WHERE \`dedupe_key\` IN (${keys.map(() => '?').join(', ')})` +
        (latest ? ' LOCK IN SHARE MODE' : ''),
      params: keys,
    };
  }

  claimSelection(table: OutboxTable, batchSize: number): Statement {
    // The index (status, available_at, id) serves both the filter and the ORDER BY: no filesort, so
    // InnoDB locks only the rows it returns and a second worker skips them. It reads what the worker
    // needs at once (the locking read visits each row anyway): no second read after the update.
    return {
      sql:
        `SELECT ${PICKED} FROM ${qt(table)} WHERE \`status\` = 'pending' AND \`available_at\` <= ${NOW} ` +
        'ORDER BY `available_at`, `id` LIMIT ? FOR UPDATE SKIP LOCKED',
      params: [batchSize],
    };
  }

  async claim(
    executor: SqlExecutor,
    table: OutboxTable,
    a: { batchSize: number; token: string; leaseMs: number; maxAttempts: number },
  ) {
    return executor.transaction(async (run) => {
      const { rows: picked } = await run(this.claimSelection(table, a.batchSize));
      if (picked.length === 0) return [];
      const ids = picked.map((row) => String(row.id));
      const list = ids.map(() => '?').join(', ');
      const spent = '`attempts` >= ?';
      // MySQL evaluates SET assignments left to right, each seeing the ones before: the history and
      // `note` (which read the old claim token) go first and `attempts` last, so every assignment reads
      // the values the row had before this claim. The attempt whose lease expired enters the history,
      // ended when its lease did.
      const expiredAttempt = appendAttempt(json, '`attempt_log`', {
        attempt: '`attempts`',
        startedAt: utcText('`claimed_at`'),
        finishedAt: utcText('`available_at`'),
        outcome: "'expired'",
        error: 'NULL',
        round: '`redrive_count`',
      });
      const { affected } = await run({
        sql: `UPDATE ${qt(table)} SET
            \`attempt_log\` = IF(\`claim_token\` IS NOT NULL, ${expiredAttempt}, \`attempt_log\`),
            \`claimed_at\` = IF(${spent}, \`claimed_at\`, ${NOW}),
            \`note\` = CASE
              WHEN \`claim_token\` IS NOT NULL THEN CONCAT('attempt ', \`attempts\`, ' of ', ?, ' ${LEASE_EXPIRED}')
              WHEN ${spent} AND \`last_error\` IS NULL THEN CONCAT('attempt ', \`attempts\`, ' of ', ?, ' ${NO_OUTCOME}')
              ELSE \`note\` END,
            \`expired_attempts\` = \`expired_attempts\` + IF(\`claim_token\` IS NOT NULL, 1, 0),
            \`last_expired_attempt\` = IF(\`claim_token\` IS NOT NULL, \`attempts\`, \`last_expired_attempt\`),
            \`claim_token\` = IF(${spent}, NULL, ?),
            \`available_at\` = IF(${spent}, \`available_at\`, ${NOW_PLUS}),
            \`status\` = IF(${spent}, 'dead', 'pending'),
            \`processed_at\` = IF(${spent}, ${NOW}, NULL),
            \`attempts\` = IF(${spent}, \`attempts\`, \`attempts\` + 1)
          WHERE \`id\` IN (${list}) AND \`status\` = 'pending' AND \`available_at\` <= ${NOW}`,
        params: [
          a.maxAttempts,
          a.maxAttempts,
          a.maxAttempts,
          a.maxAttempts,
          a.maxAttempts,
          a.token,
          a.maxAttempts,
          a.leaseMs * 1000,
          a.maxAttempts,
          a.maxAttempts,
          a.maxAttempts,
          ...ids,
        ],
      });
      if (affected !== picked.length) {
        // The rows are locked since the read and still due: never seen. Roll back rather than guess.
        throw new Error(`the claim updated ${affected} of the ${picked.length} rows it locked`);
      }
      return picked.map((row) => afterClaim(row, a.maxAttempts));
    });
  }

  acknowledge(table: OutboxTable, ids: string[], token: string): Statement {
    return {
      sql:
        `UPDATE ${byId(table)} SET \`status\` = 'delivered', \`claim_token\` = NULL, \`processed_at\` = ${NOW} ` +
        `WHERE \`id\` IN (${ids.map(() => '?').join(', ')}) AND ${HELD}`,
      params: [...ids, token],
    };
  }

  fail(table: OutboxTable, id: string, token: string, u: FailureUpdate): Statement {
    const dead = u.deadLetter ? 1 : 0;
    const failedAttempt = appendAttempt(json, '`attempt_log`', {
      attempt: '`attempts`',
      startedAt: utcText('`claimed_at`'),
      finishedAt: utcText(NOW),
      outcome: "IF(?, 'dead', 'failed')",
      error: `LEFT(?, ${LOGGED_ERROR_LENGTH})`,
      round: '`redrive_count`',
    });
    return {
      sql:
        `UPDATE ${byId(table)} SET ` +
        `\`available_at\` = IF(?, \`available_at\`, ${NOW_PLUS}), ` +
        `\`status\` = IF(?, 'dead', 'pending'), \`claim_token\` = NULL, ` +
        `\`processed_at\` = IF(?, ${NOW}, NULL), ` +
        `\`last_error\` = ?, \`completed_handlers\` = ?, \`attempt_log\` = ${failedAttempt} WHERE \`id\` = ? AND ${HELD}`,
      params: [
        dead,
        u.retryDelayMs * 1000,
        dead,
        dead,
        u.error,
        JSON.stringify(u.completedHandlers),
        dead,
        u.error,
        id,
        token,
      ],
    };
  }

  release(table: OutboxTable, ids: string[], token: string, uncount: boolean): Statement {
    return {
      sql:
        `UPDATE ${byId(table)} SET \`claim_token\` = NULL, \`available_at\` = ${NOW}, ` +
        // An attempt given back counted (its handler ran, shutdown stopped waiting) enters the history.
        `\`attempt_log\` = IF(? = 0, ${appendAttempt(json, '`attempt_log`', {
          attempt: '`attempts`',
          startedAt: utcText('`claimed_at`'),
          finishedAt: utcText(NOW),
          outcome: "'released'",
          error: 'NULL',
          round: '`redrive_count`',
        })}, \`attempt_log\`), ` +
        `\`attempts\` = \`attempts\` - ? WHERE \`id\` IN (${ids.map(() => '?').join(', ')}) AND ${HELD}`,
      params: [uncount ? 1 : 0, uncount ? 1 : 0, ...ids, token],
    };
  }

  async renew(executor: SqlExecutor, table: OutboxTable, a: { ids: string[]; token: string; leaseMs: number }) {
    const list = a.ids.map(() => '?').join(', ');
    const { affected } = await executor.run({
      sql: `UPDATE ${byId(table)} SET \`available_at\` = ${NOW_PLUS} WHERE \`id\` IN (${list}) AND ${HELD}`,
      params: [a.leaseMs * 1000, ...a.ids, a.token],
    });
    if (affected === a.ids.length) return a.ids;
    if (affected === 0) return [];
    // No RETURNING: the renewed rows are read back. A row not renewed can never be this token's again,
    // and one renewed stays its own for a whole lease, so the two statements need no transaction.
    const { rows } = await executor.run({
      sql: `SELECT \`id\` FROM ${byId(table)} WHERE \`id\` IN (${list}) AND ${HELD}`,
      params: [...a.ids, a.token],
    });
    return rows.map((row) => String(row.id));
  }

  counts(table: OutboxTable): Statement {
    return {
      sql:
        `SELECT \`status\`, CASE WHEN \`available_at\` <= ${NOW} THEN 'due' WHEN \`claim_token\` IS NOT NULL THEN 'in_flight' ` +
        `ELSE 'scheduled' END AS \`state\`, COUNT(*) AS \`n\` FROM ${qt(table)} GROUP BY \`status\`, \`state\``,
      params: [],
    };
  }

  indexes = indexesOf;
  purge = purgeBatch;
  purgeSelection = purgeSelection;
  decode = decodeRow;
}

/**
 * A claimed row as the claim's update leaves it, from the row as the locking read found it: the same
 * rules as the update's assignments (a lease still held has expired; an event whose attempts are spent
 * is dead, noted as without outcome when it has no error of its own).
 */
function afterClaim(row: Record<string, unknown>, maxAttempts: number): Record<string, unknown> {
  const attempts = Number(row.attempts);
  const spent = attempts >= maxAttempts;
  const expired = row.claim_token != null;
  let note = row.note;
  if (expired) note = `attempt ${attempts} of ${maxAttempts} ${LEASE_EXPIRED}`;
  else if (spent && row.last_error == null) note = `attempt ${attempts} of ${maxAttempts} ${NO_OUTCOME}`;
  return {
    ...row,
    status: spent ? 'dead' : 'pending',
    attempts: spent ? attempts : attempts + 1,
    note,
    last_expired_attempt: expired ? attempts : row.last_expired_attempt,
  };
}
