import type { AuditOutcome, OutboxDialect, SqlExecutor } from '../dialects/shared/outbox-dialect.interface';
import { toDate } from '../dialects/shared/outbox-columns';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';
import { OutboxTableMissingError, OutboxValidationError } from '../errors/outbox.errors';
import type { OutboxOperationResult, OutboxSelection } from '../interfaces/outbox-operations.interface';
import { DEFAULT_AUDIT_TABLE_NAME } from '../schema/admin-migrations';
import type { OutboxStore } from '../store/outbox.store';
import { uuidv7 } from '../utils/uuidv7';

/** The most listed ids an audit row keeps (the count is kept whole). */
const KEPT_IDS = 20;
/** The most characters of a selection's JSON an audit row keeps. */
const SELECTION_CHARS = 4_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** One mutation as the audit trail keeps it. */
export interface OutboxAdminAuditEntry {
  id: string;
  startedAt: Date;
  finishedAt: Date | null;
  actor: string | null;
  /** `redrive`, `discard` or `deliverNow`. */
  action: string;
  selection: unknown;
  options: Record<string, unknown>;
  matched: number | null;
  changed: number | null;
  skipped: number | null;
  /** `started` (it did not finish: the process stopped meanwhile), `done` or `failed`. */
  outcome: 'started' | 'done' | 'failed';
  error: string | null;
}

export interface OutboxAdminAuditPage {
  items: OutboxAdminAuditEntry[];
  nextCursor: string | null;
}

/** What a selection's row says: a long list of ids is cut to its first ones and its count. */
function keptSelection(selection: OutboxSelection): string {
  const kept =
    'ids' in selection && Array.isArray(selection.ids) && selection.ids.length > KEPT_IDS
      ? { ids: selection.ids.slice(0, KEPT_IDS), idsCount: selection.ids.length }
      : selection;
  const text = JSON.stringify(kept);
  return text.length > SELECTION_CHARS ? `${text.slice(0, SELECTION_CHARS - 1)}…` : text;
}

function parsed(text: unknown): unknown {
  try {
    return JSON.parse(String(text));
  } catch {
    // A selection cut to the column's length is no JSON any more: shown as the text it is.
    return String(text);
  }
}

const count = (value: unknown) => (value == null ? null : Number(value));

/**
 * The admin page's audit trail, in its own table beside the outbox's: a row is written before a mutation
 * runs and completed after it, so no mutation runs unrecorded — if the row cannot be written, the
 * mutation does not run.
 */
export class AdminAudit {
  readonly table: OutboxTable;
  private readonly dialect: OutboxDialect;
  private readonly executor: SqlExecutor;

  constructor(
    store: OutboxStore,
    private readonly tableName: string,
  ) {
    this.dialect = store.dialect;
    this.executor = store.executor;
    this.table = outboxTableOn(store.dataSource, tableName);
  }

  /** Refuses to start without the table, naming its migrations. */
  async check(): Promise<void> {
    const { rows } = await this.executor.run(this.dialect.schema.tableExists(this.table));
    const found = rows[0]?.found;
    if (found === true || Number(found) > 0) return;
    const migrations =
      this.tableName === DEFAULT_AUDIT_TABLE_NAME
        ? '...OutboxAdminMigrations'
        : `...createOutboxAdminMigrations('${this.tableName}')`;
    throw new OutboxTableMissingError(
      this.table.path,
      `It is the admin page's audit trail: add ${migrations} to the DataSource's migrations and run them.`,
    );
  }

  /** Records a mutation about to run; its id. */
  async begin(
    actor: string | null,
    action: string,
    selection: OutboxSelection,
    options: Record<string, unknown>,
  ): Promise<string> {
    const id = uuidv7();
    await this.executor.run(
      this.dialect.audit.begin(this.table, {
        id,
        actor,
        action,
        selection: keptSelection(selection),
        options: JSON.stringify(options),
      }),
    );
    return id;
  }

  async finish(id: string, result: OutboxOperationResult | undefined, error?: string): Promise<void> {
    const outcome: AuditOutcome = result
      ? {
          matched: result.matched,
          changed: result.changed,
          skipped: result.skipped.length,
          outcome: 'done',
          error: null,
        }
      : { matched: null, changed: null, skipped: null, outcome: 'failed', error: error?.slice(0, 2_000) ?? null };
    await this.executor.run(this.dialect.audit.finish(this.table, id, outcome));
  }

  /** A page of the trail, newest first; `cursor` is the last id of the page before. */
  async page(limit: number, cursor?: string): Promise<OutboxAdminAuditPage> {
    if (cursor !== undefined && !UUID.test(cursor)) {
      throw new OutboxValidationError('cursor', 'expected the nextCursor of the page before');
    }
    const { rows } = await this.executor.run(this.dialect.audit.page(this.table, limit + 1, cursor?.toLowerCase()));
    const items = rows.slice(0, limit).map((row): OutboxAdminAuditEntry => ({
      id: String(row.id),
      startedAt: toDate(row.started_at),
      finishedAt: row.finished_at == null ? null : toDate(row.finished_at),
      actor: row.actor == null ? null : (row.actor as string),
      action: String(row.action),
      selection: parsed(row.selection),
      options: parsed(row.options) as Record<string, unknown>,
      matched: count(row.matched),
      changed: count(row.changed),
      skipped: count(row.skipped),
      outcome: String(row.outcome) as OutboxAdminAuditEntry['outcome'],
      error: row.error == null ? null : (row.error as string),
    }));
    return { items, nextCursor: rows.length > limit ? items[items.length - 1].id : null };
  }
}
