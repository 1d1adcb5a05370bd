import type { Statement } from '../dialects/shared/outbox-dialect.interface';
import { OutboxValidationError } from '../errors/outbox.errors';
import type {
  OutboxEventState,
  OutboxOperationResult,
  OutboxSkippedEvent,
} from '../interfaces/outbox-operations.interface';
import type { OutboxStore } from '../store/outbox.store';
import type { KeyedEvent, RunStatement } from '../ordering/ordered-keys';
import { topicMatches } from '../utils/topic';
import { errorFingerprint, errorSignature } from './error-fingerprint';
import type { EventQuery, SelectionQuery } from './operations-input';
import type { OperationsStatements } from './operations-statements';

/** Ids locked and changed per transaction: short transactions, bounded statements. */
const CHUNK = 500;
/** Rows read per page when a selection is scanned. */
const SCAN_PAGE = 1000;

/**
 * A change of one state, applied to events read in `from` under their row locks; `change` checks again
 * what a lock holds still (the status, the claim), never the clock, which moved since the read.
 */
export interface StateChange {
  name: string;
  from: OutboxEventState;
  change(ids: string[]): Statement;
  /**
   * After `change`, in its transaction: what the change means for the order of the changed events of
   * ordered keys. Returns the heads of keys the change unblocked.
   */
  reorder?(run: RunStatement, events: KeyedEvent[]): Promise<KeyedEvent[]>;
}

/** What `apply` did, and the keys whose dead head it redrove or discarded. */
export interface AppliedChange extends OutboxOperationResult {
  unblocked: KeyedEvent[];
}

/** What one chunk's committed transaction (or dry run) found and changed. */
type ChunkOutcome = Omit<AppliedChange, 'dryRun'>;

/** The error text a dead letter is grouped by. */
export function failureText(row: Record<string, unknown>): string {
  return (row.last_error ?? row.note ?? '(no error recorded)') as string;
}

/** Restricts a filter to the one state an operation changes; a filter asking for another state is a mistake. */
export function onlyState(query: EventQuery, state: OutboxEventState, what: string, field: string): EventQuery {
  if (query.states && !(query.states.length === 1 && query.states[0] === state)) {
    throw new OutboxValidationError(
      field,
      `${what} applies to ${state} events only: leave status out or set it to "${state}"`,
    );
  }
  return { ...query, states: [state] };
}

/**
 * Applies a state change to a selection: ids chunk by chunk, each chunk in one short transaction that
 * locks its rows, then reads their state and changes only those in the state the operation changes
 * (a compare-and-set, so a claim, another operator or retention racing it never ends with two owners).
 */
export class SelectionRunner {
  constructor(
    private readonly store: OutboxStore,
    private readonly sql: OperationsStatements,
  ) {}

  async apply(selection: SelectionQuery, op: StateChange, dryRun: boolean): Promise<AppliedChange> {
    const result: AppliedChange = { dryRun, matched: 0, changed: 0, skipped: [], unblocked: [] };
    for await (const ids of this.resolve(selection, op)) {
      for (let i = 0; i < ids.length; i += CHUNK) {
        // Added once the chunk is done: the executor runs a transaction again after a deadlock or a busy
        // database, and only the attempt that committed counts.
        const chunk = await this.applyTo(ids.slice(i, i + CHUNK), op, dryRun);
        result.matched += chunk.matched;
        result.changed += chunk.changed;
        result.skipped.push(...chunk.skipped);
        result.unblocked.push(...chunk.unblocked);
      }
    }
    return result;
  }

  private async applyTo(ids: string[], op: StateChange, dryRun: boolean): Promise<ChunkOutcome> {
    if (dryRun) {
      const { qualifying, skipped } = this.settle(ids, op, (await this.store.executor.run(this.sql.states(ids))).rows);
      return { matched: qualifying.length, changed: 0, skipped, unblocked: [] };
    }
    return this.store.executor.transaction(async (run) => {
      const lock = this.sql.lock(ids);
      if (lock) await run(lock);
      // Read once the rows are locked, by a clock after any wait for them: none of them changes before the
      // commit, so the change applies to exactly the events read in the state it changes.
      const { rows } = await run(this.sql.states(ids));
      const { qualifying, skipped } = this.settle(ids, op, rows);
      const changed = qualifying.length === 0 ? 0 : (await run(op.change(qualifying))).affected;
      const chosen = new Set(qualifying);
      const ordered = rows
        .filter((row) => row.seq !== null && row.key !== null && chosen.has(String(row.id)))
        .map((row) => ({ id: String(row.id), key: String(row.key) }));
      const unblocked = op.reorder && ordered.length > 0 ? await op.reorder(run, ordered) : [];
      return { matched: qualifying.length, changed, skipped, unblocked };
    });
  }

  /** Splits a chunk by the state each event is in: those the operation changes, and the others skipped. */
  private settle(
    ids: string[],
    op: StateChange,
    rows: Record<string, unknown>[],
  ): { qualifying: string[]; skipped: OutboxSkippedEvent[] } {
    const states = new Map(rows.map((row) => [String(row.id), String(row.op_state) as OutboxEventState]));
    const qualifying: string[] = [];
    const skipped: OutboxSkippedEvent[] = [];
    for (const id of ids) {
      const state = states.get(id);
      if (state === op.from) qualifying.push(id);
      else skipped.push({ id, reason: state ?? 'not-found' });
    }
    return { qualifying, skipped };
  }

  /** The ids of a selection, page by page. */
  private async *resolve(selection: SelectionQuery, op: StateChange): AsyncGenerator<string[]> {
    if ('ids' in selection) {
      yield selection.ids;
      return;
    }
    if ('filter' in selection) {
      const query = onlyState(selection.filter, op.from, op.name, 'selection.filter.status');
      const pattern = query.topic && 'pattern' in query.topic ? query.topic.pattern : undefined;
      for await (const rows of this.scan(query, `${this.sql.idColumn()}, ${this.sql.topicColumn()}`)) {
        yield rows.filter((row) => !pattern || topicMatches(pattern, String(row.topic))).map((row) => String(row.id));
      }
      return;
    }
    if (op.from !== 'dead') {
      throw new OutboxValidationError(
        'selection.group',
        `failure groups are dead letters; ${op.name} applies to ${op.from} events`,
      );
    }
    const { topic, fingerprint } = selection.group;
    for await (const rows of this.scan({ states: ['dead'], topic: { exact: topic } }, this.sql.failureColumns())) {
      yield rows
        .filter((row) => errorFingerprint(topic, errorSignature(failureText(row))) === fingerprint)
        .map((row) => String(row.id));
    }
  }

  /** Every row a query selects, oldest first, a page at a time (keyset on the id: rows that change meanwhile are not revisited). */
  async *scan(query: EventQuery, columns: string): AsyncGenerator<Record<string, unknown>[]> {
    let after: string | undefined;
    for (;;) {
      const { rows } = await this.store.executor.run(
        this.sql.page(query, { limit: SCAN_PAGE, newestFirst: false, after, columns }),
      );
      if (rows.length > 0) yield rows;
      if (rows.length < SCAN_PAGE) return;
      after = String(rows[rows.length - 1].id);
    }
  }
}
