import type { ClaimArgs, OutboxDialect, RenewalArgs, SqlExecutor, Statement } from '../shared/outbox-dialect.interface';
import { mysqlAudit } from './mysql-audit';
import { mysqlInbox } from './mysql-inbox';
import { decodeRow, driverErrno, indexNames, requireVersion } from '../shared/dialect.util';
import { CLAIMED } from '../shared/outbox-columns';
import { indexesOf, purgeBatch, purgeSelection } from './mysql-retention';
import { mysqlSchema } from './mysql-schema';
import { COLUMNS, NOW, q, qt, selected } from './mysql-sql';
import { mysqlFlavor } from './mysql-flavor';
import { afterClaim, claimAssignments } from '../shared/claim-rules';
import { heldAmong, renewStatement } from '../shared/outcome-statements';
import { StatementBuilder } from '../shared/statement-builder';
import type { OutboxTable } from '../shared/outbox-table';

/**
 * What the claim's locking read returns: the columns of `ClaimedEvent` as they were before the claim
 * (times as UTC text), and the claim token, from which `afterClaim` derives them as the claim's update
 * leaves them.
 */
const PICKED = [...CLAIMED.map(selected), q('claim_token')].join(', ');

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

  /** The table's versions and the start-up checks: mysql-schema.ts (its indexes: mysql-retention.ts). */
  readonly schema = { ...mysqlSchema, indexes: indexesOf };

  /** The inbox table of a receiving service: mysql-inbox.ts. */
  readonly inbox = mysqlInbox;
  /** The admin page's audit trail: mysql-audit.ts. */
  readonly audit = mysqlAudit;

  isTransient(error: unknown): boolean {
    // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
    const errno = driverErrno(error);
    return errno === 1213 || errno === 1205;
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

  claimSelection(table: OutboxTable, batchSize: number, heldTokens: readonly string[] = []): Statement {
    // The index (status, available_at, id) serves both the filter and the ORDER BY: no filesort, so
    // InnoDB locks only the rows it returns and a second worker skips them. Forced: on a small table
    // emptied again and again the optimizer chose otherwise, and its plan locked every due row it read,
    // so a second claim took none of those the first left. It reads what the worker
    // needs at once (the locking read visits each row anyway): no second read after the update. A row
    // one of the worker's own claims still holds fails the condition on the row it has read, and at
    // READ COMMITTED its lock is let go at once.
    const held = heldTokens.map(() => '?').join(', ');
    return {
      sql:
        `SELECT ${PICKED} FROM ${qt(table)} FORCE INDEX (${q(indexNames(table.name).claim)}) ` +
        `WHERE \`status\` = 'pending' AND \`available_at\` <= ${NOW} ` +
        (held ? `AND (\`claim_token\` IS NULL OR \`claim_token\` NOT IN (${held})) ` : '') +
        'ORDER BY `available_at`, `id` LIMIT ? FOR UPDATE SKIP LOCKED',
      params: [...heldTokens, batchSize],
    };
  }

  async claim(executor: SqlExecutor, table: OutboxTable, a: ClaimArgs) {
    return executor.transaction(async (run) => {
      const { rows: picked } = await run(this.claimSelection(table, a.batchSize, a.heldTokens));
      if (picked.length === 0) return [];
      const ids = picked.map((row) => String(row.id));
      const b = new StatementBuilder(this.flavor.placeholder);
      const set = claimAssignments(this.flavor, {
        now: NOW,
        leaseEnd: this.flavor.later(b.bind, a.leaseMs),
        token: b.bind(a.token),
        maxAttempts: b.bind(a.maxAttempts),
      });
      const { affected } = await run(
        b.statement(`UPDATE ${qt(table)} SET
    ${set}
  WHERE ${this.flavor.idIn(b.bind, ids)} AND \`status\` = 'pending' AND \`available_at\` <= ${NOW}`),
      );
      if (affected !== picked.length) {
        // The rows are locked since the read and still due: never seen. Roll back rather than guess.
        throw new Error(`the claim updated ${affected} of the ${picked.length} rows it locked`);
      }
      return picked.map((row) => afterClaim(row, a.maxAttempts));
    });
  }

  async renew(executor: SqlExecutor, table: OutboxTable, a: RenewalArgs) {
    const { affected } = await executor.run(renewStatement(this.flavor, table, a));
    if (affected === a.ids.length) return a.ids;
    if (affected === 0) return [];
    // No RETURNING: the renewed rows are read back. A row not renewed can never be this token's again,
    // and one renewed stays its own for a whole lease, so the two statements need no transaction.
    const { rows } = await executor.run(heldAmong(this.flavor, table, a.ids, a.token));
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

  purge = purgeBatch;
  purgeSelection = purgeSelection;
  decode = decodeRow;
}
