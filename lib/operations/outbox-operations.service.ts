import { Inject, Injectable, type Logger } from '@nestjs/common';
import { toDate } from '../dialects/shared/outbox-columns';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type {
  OutboxBlockedKey,
  OutboxBlockedKeysOptions,
  OutboxEventDetails,
  OutboxEventFilter,
  OutboxEventPage,
  OutboxEventView,
  OutboxFailureGroup,
  OutboxOperationOptions,
  OutboxOperationResult,
  OutboxPageRequest,
  OutboxRedriveOptions,
  OutboxSelection,
  OutboxStats,
  OutboxStatsOptions,
} from '../interfaces/outbox-operations.interface';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { OutboxEventNotFoundError } from '../errors/outbox.errors';
import type { OutboxStore } from '../store/outbox.store';
import { topicMatches } from '../utils/topic';
import { aboutEvents } from '../utils/log-record';
import { errorFingerprint, errorSignature } from './error-fingerprint';
import { eventDetails, eventView, readEvent } from './event-views';
import {
  booleanArgument,
  nextCursor,
  validateFilter,
  validateIds,
  validateOperationOptions,
  validatePage,
  validateSelection,
  validateBlockedKeysOptions,
  type SelectionQuery,
} from './operations-input';
import { OperationsStatements } from './operations-statements';
import { StatsReader } from './stats-reader';
import { OutboxEvents } from '../events/outbox-events';
import { failureText, onlyState, SelectionRunner, type StateChange } from './selection-runner';

/** The most ids a log line names. */
const LOGGED_IDS = 20;

/**
 * What an operator does with the outbox, without SQL: find any event, read its attempts, redrive or
 * discard dead letters, deliver delayed events now, see failures grouped and the table's state. Every
 * figure and every state comes from the database (its clock included), so all of it works with no
 * worker running anywhere; every change is a compare-and-set on the event's state.
 */
@Injectable()
export class OutboxOperations {
  private readonly logger: Logger;
  private readonly sql: OperationsStatements;
  private readonly runner: SelectionRunner;
  private readonly statsReader: StatsReader;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    private readonly events: OutboxEvents,
  ) {
    this.logger = options.errorText.logger('OutboxOperations');
    this.sql = new OperationsStatements(store.dialect.flavor, store.table);
    this.runner = new SelectionRunner(store, this.sql);
    this.statsReader = new StatsReader(store, this.sql);
  }

  /**
   * A page of the events a filter selects, newest first unless `order: 'oldest'`. Pass `nextCursor`
   * back for the next page; pages stay consistent while events are added and change state.
   */
  async find(filter?: OutboxEventFilter, page?: OutboxPageRequest): Promise<OutboxEventPage> {
    const query = validateFilter(filter);
    const p = validatePage(page);
    const pattern = query.topic && 'pattern' in query.topic ? query.topic.pattern : undefined;
    // One more than the page, to know whether another follows; a topic pattern is matched here, so scan on.
    const want = p.limit + 1;
    const scan = pattern ? Math.max(want, 200) : want;
    const items: OutboxEventView[] = [];
    let after = p.after;
    for (;;) {
      const { rows } = await this.store.executor.run(
        this.sql.page(query, { limit: scan, newestFirst: p.newestFirst, after }),
      );
      for (const row of rows) {
        if (items.length === want) break;
        if (pattern && !topicMatches(pattern, String(row.topic))) continue;
        const { event, state } = readEvent(this.store.dialect, row, this.options.errorText);
        items.push(eventView(event, state));
      }
      if (items.length === want || rows.length < scan) break;
      after = String(rows[rows.length - 1].id);
    }
    const more = items.length > p.limit;
    if (more) items.pop();
    return { items, nextCursor: more ? nextCursor(p, items[items.length - 1].id) : null };
  }

  /** One event with its attempt history, or null when there is no such event (any more). */
  async get(id: string): Promise<OutboxEventDetails | null> {
    const [valid] = validateIds('id', id);
    const { rows } = await this.store.executor.run(this.sql.page({ ids: [valid] }, { limit: 1, newestFirst: true }));
    if (rows.length === 0) return null;
    const { event, state } = readEvent(this.store.dialect, rows[0], this.options.errorText);
    return eventDetails(event, state);
  }

  /** One event with its attempt history; `OutboxEventNotFoundError` (HTTP 404 in Nest) when there is no such event. */
  async getOrFail(id: string): Promise<OutboxEventDetails> {
    const event = await this.get(id);
    if (!event) throw new OutboxEventNotFoundError(id);
    return event;
  }

  /**
   * Dead letters back to pending, due now, with the same id, their redrive count raised and their
   * attempts reset (unless `resetAttempts: false`). Handlers that already succeeded are not run again.
   * Events of the selection that are not dead letters are reported as skipped.
   */
  async redrive(selection: OutboxSelection, options?: OutboxRedriveOptions): Promise<OutboxOperationResult> {
    const selected = validateSelection(selection);
    const o = validateOperationOptions(options, ['dryRun', 'resetAttempts']);
    const reset = booleanArgument('options.resetAttempts', o.resetAttempts, true);
    const { maxAttempts } = this.options.retry;
    return this.change(selected, o, {
      name: 'redrive',
      from: 'dead',
      change: (ids) => this.sql.redrive(ids, reset, maxAttempts),
      reorder: (run, events) => this.store.keys.requeue(run, events),
    });
  }

  /** Dead letters deleted for good (their dedupe keys free again). Events of the selection that are not dead are skipped. */
  async discard(selection: OutboxSelection, options?: OutboxOperationOptions): Promise<OutboxOperationResult> {
    const selected = validateSelection(selection);
    const o = validateOperationOptions(options, ['dryRun']);
    return this.change(selected, o, {
      name: 'discard',
      from: 'dead',
      change: (ids) => this.sql.discard(ids),
      reorder: (run, events) => this.store.keys.unblock(run, events),
    });
  }

  /** Scheduled events (delayed, or waiting out a retry's backoff) made due now. Others are skipped. */
  async deliverNow(selection: OutboxSelection, options?: OutboxOperationOptions): Promise<OutboxOperationResult> {
    const selected = validateSelection(selection);
    const o = validateOperationOptions(options, ['dryRun']);
    return this.change(selected, o, {
      name: 'deliverNow',
      from: 'scheduled',
      change: (ids) => this.sql.deliverNow(ids),
    });
  }

  private async change(
    selection: SelectionQuery,
    options: Record<string, unknown>,
    op: StateChange,
  ): Promise<OutboxOperationResult> {
    const dryRun = booleanArgument('options.dryRun', options.dryRun, false);
    const { unblocked, ...result } = await this.runner.apply(selection, op, dryRun);
    if (this.events.observed) {
      const how = op.name === 'redrive' ? 'redrive' : 'discard';
      for (const { key, id } of unblocked) this.events.emit({ type: 'key.unblocked', key, id, how });
    }
    if (result.changed > 0) {
      // A discard may have made the next event of a key due.
      this.store.eventsMadeDue();
      this.logChange(op, result, selection);
    }
    return result;
  }

  private logChange(op: StateChange, result: OutboxOperationResult, selection: SelectionQuery): void {
    const by =
      'ids' in selection
        ? 'listed ids'
        : 'filter' in selection
          ? 'a filter'
          : `failure group ${selection.group.fingerprint}`;
    const listed = 'ids' in selection && selection.ids.length <= LOGGED_IDS ? selection.ids : undefined;
    const ids = listed ? `: ${listed.join(', ')}` : '';
    const what = { redrive: 'redriven', discard: 'discarded', deliverNow: 'made due now' }[op.name] ?? op.name;
    const text = `${result.changed} ${op.from} event(s) of ${this.store.table.path} ${what} (selected by ${by})${ids}`;
    // The ids listed, as a field too (a filter's or a group's are not known here).
    const line = listed ? aboutEvents(text, listed) : text;
    if (op.name === 'discard') this.logger.warn(line);
    else this.logger.log(line);
  }

  /**
   * Dead letters grouped by topic and by their error with the parts that vary (numbers, ids, quoted
   * values) replaced: the groups with most events first. Redrive or discard one with `{ group }`.
   */
  async failureGroups(filter?: OutboxEventFilter): Promise<OutboxFailureGroup[]> {
    const query = onlyState(validateFilter(filter), 'dead', 'failureGroups', 'filter.status');
    const pattern = query.topic && 'pattern' in query.topic ? query.topic.pattern : undefined;
    const groups = new Map<string, OutboxFailureGroup>();
    for await (const rows of this.runner.scan(query, this.sql.failureColumns())) {
      for (const row of rows) {
        const topic = String(row.topic);
        if (pattern && !topicMatches(pattern, topic)) continue;
        const error = failureText(row);
        const signature = errorSignature(error);
        const fingerprint = errorFingerprint(topic, signature);
        const seen = row.processed_at == null ? new Date(0) : toDate(row.processed_at);
        const group = groups.get(fingerprint);
        if (!group) {
          const id = String(row.id);
          groups.set(fingerprint, {
            topic,
            fingerprint,
            signature,
            count: 1,
            firstSeen: seen,
            lastSeen: seen,
            sampleId: id,
            sampleError: error,
          });
          continue;
        }
        group.count++;
        if (seen < group.firstSeen) group.firstSeen = seen;
        if (seen > group.lastSeen) group.lastSeen = seen;
      }
    }
    return [...groups.values()].sort((a, b) => b.count - a.count || b.lastSeen.getTime() - a.lastSeen.getTime());
  }

  /**
   * Counts by state and topic, the oldest due event's wait, the last claim and recent deliveries, all
   * by the database and through its indexes: every figure is exact except `delivered` on a big table,
   * which the database estimates unless `exact: true` (see `OutboxStats.delivered`).
   */
  /**
   * Keys of ordered topics stopped behind a dead head (`deadHead: 'block'`), the longest blocked first,
   * with the head, its error and how many events wait behind it. Redrive the head (it is delivered
   * first) or discard it (the next event goes on) to unblock its key.
   */
  async blockedKeys(options?: OutboxBlockedKeysOptions): Promise<OutboxBlockedKey[]> {
    const limit = validateBlockedKeysOptions(options);
    const { rows } = await this.store.executor.run(this.store.keys.statements.blockedKeys(limit));
    return rows.map((row) => ({
      key: String(row.key),
      headId: String(row.id),
      topic: String(row.topic),
      state: 'dead' as const,
      attempts: Number(row.attempts),
      error: (row.last_error ?? row.note ?? null) as string | null,
      since: toDate(row.processed_at),
      waiting: Number(row.waiting),
    }));
  }

  async stats(options?: OutboxStatsOptions): Promise<OutboxStats> {
    const exact = booleanArgument('options.exact', validateOperationOptions(options, ['exact']).exact, false);
    return this.statsReader.read(exact);
  }
}
