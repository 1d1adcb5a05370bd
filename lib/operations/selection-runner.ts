import type { Statement } from '../dialects/shared/outbox-dialect.interface';
import { OutboxValidationError } from '../errors/outbox.errors';
import type { OutboxEventState, OutboxOperationResult } from '../interfaces/outbox-operations.interface';
import type { OutboxStore } from '../store/outbox.store';
import { topicMatches } from '../utils/topic';
import { errorFingerprint, errorSignature } from './error-fingerprint';
import type { EventQuery, SelectionQuery } from './operations-input';
import type { OperationsStatements } from './operations-statements';

/** Ids locked and changed per transaction: short transactions, bounded statements. */
const CHUNK = 500;
/** Rows read per page when a selection is scanned. */
const SCAN_PAGE = 1000;

/** A change of one state: only events in `from` are changed, each checked again under its row lock. */
export interface StateChange {
  name: string;
  from: OutboxEventState;
  change(ids: string[]): Statement;
}

/** The error text a dead letter is grouped by. */
export function failureText(row: Record<string, unknown>): string {
  return String(row.last_error ?? row.note ?? '(no error recorded)');
}

/** Restricts a filter to the one state an operation changes; a filter asking for another state is a mistake. */
export function onlyState(query: EventQuery, state: OutboxEventState, what: string, field: string): EventQuery {
  if (query.states && !(query.states.length === 1 && query.states[0] === state)) {
    throw new OutboxValidationError(field, `${what} applies to ${state} events only: leave status out or set it to "${state}"`);
  }
  return { ...query, states: [state] };
}

/**
 * Applies a state change to a selection: ids chunk by chunk, each chunk in one short transaction that
 * locks its rows, reads their state and changes only those still in the state the operation changes
 * (a compare-and-set, so a claim, another operator or retention racing it never ends with two owners).
 */
export class SelectionRunner {
  constructor(
    private readonly store: OutboxStore,
    private readonly sql: OperationsStatements,
  ) {}

  async apply(selection: SelectionQuery, op: StateChange, dryRun: boolean): Promise<OutboxOperationResult> {
    const result: OutboxOperationResult = { dryRun, matched: 0, changed: 0, skipped: [] };
    for await (const ids of this.resolve(selection, op)) {
      for (let i = 0; i < ids.length; i += CHUNK) await this.applyTo(ids.slice(i, i + CHUNK), op, dryRun, result);
    }
    return result;
  }

  private async applyTo(ids: string[], op: StateChange, dryRun: boolean, result: OutboxOperationResult): Promise<void> {
    const settle = (rows: Record<string, unknown>[]) => {
      const states = new Map(rows.map((row) => [String(row.id), String(row.op_state) as OutboxEventState]));
      const qualifying: string[] = [];
      for (const id of ids) {
        const state = states.get(id);
        if (state === op.from) qualifying.push(id);
        else result.skipped.push({ id, reason: state ?? 'not-found' });
      }
      result.matched += qualifying.length;
      return qualifying;
    };
    if (dryRun) {
      settle((await this.store.executor.run(this.sql.lockStates(ids, false))).rows);
      return;
    }
    result.changed += await this.store.executor.transaction(async (run) => {
      const qualifying = settle((await run(this.sql.lockStates(ids, true))).rows);
      return qualifying.length === 0 ? 0 : (await run(op.change(qualifying))).affected;
    });
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
      throw new OutboxValidationError('selection.group', `failure groups are dead letters; ${op.name} applies to ${op.from} events`);
    }
    const { topic, fingerprint } = selection.group;
    for await (const rows of this.scan({ states: ['dead'], topic: { exact: topic } }, this.sql.failureColumns())) {
      yield rows.filter((row) => errorFingerprint(topic, errorSignature(failureText(row))) === fingerprint).map((row) => String(row.id));
    }
  }

  /** Every row a query selects, oldest first, a page at a time (keyset on the id: rows that change meanwhile are not revisited). */
  async *scan(query: EventQuery, columns: string): AsyncGenerator<Record<string, unknown>[]> {
    let after: string | undefined;
    for (;;) {
      const { rows } = await this.store.executor.run(this.sql.page(query, { limit: SCAN_PAGE, newestFirst: false, after, columns }));
      if (rows.length > 0) yield rows;
      if (rows.length < SCAN_PAGE) return;
      after = String(rows[rows.length - 1].id);
    }
  }
}
