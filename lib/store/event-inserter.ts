import type { EntityManager } from 'typeorm';
import type { InsertedRow } from '../dialects/shared/insert-statement';
import type {
  OutboxDialect,
  Statement,
  StatementResult,
  StoredEvent,
} from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import { OutboxDedupeConflictError } from '../errors/outbox.errors';
import type { OutboxEvents } from '../events/outbox-events';
import type { PublishResult } from '../interfaces/outbox-message.interface';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { sortKeys, type OrderedKeys } from '../ordering/ordered-keys';
import { uuidv7 } from '../utils/uuidv7';
import { transactionDepth, type CommitWatcher } from './commit-watcher';
import { keyNotStored, sameContent, sameStored } from './dedupe-keys';
import { insertStatements } from './insert-chunks';
import { queryOn } from './sql-executor';

/** What a lookup of no dedupe keys finds (never written to). */
const NONE_STORED: ReadonlyMap<string, StoredEvent> = new Map();

/** Publishing: the events' rows written in the caller's transaction, dedupe keys and key order included. */
export class EventInserter {
  constructor(
    private readonly dialect: OutboxDialect,
    private readonly table: OutboxTable,
    private readonly keys: OrderedKeys,
    private readonly commits: CommitWatcher,
    private readonly events: OutboxEvents,
  ) {}

  private runIn(manager: EntityManager, statement: Statement): Promise<StatementResult> {
    return queryOn(manager.queryRunner!, statement);
  }

  /**
   * Inserts events in the caller's transaction. Dedupe keys are checked before anything is written,
   * so a conflict leaves the table as it was.
   */
  async insert(manager: EntityManager, events: ValidatedEvent[]): Promise<PublishResult[]> {
    // Within one call, a repeated dedupe key stands for its first occurrence.
    const firstIndex = new Map<string, number>();
    events.forEach((event, index) => {
      if (event.dedupeKey === null) return;
      const first = firstIndex.get(event.dedupeKey);
      if (first === undefined) firstIndex.set(event.dedupeKey, index);
      else if (!sameContent(events[first], event)) {
        throw new OutboxDedupeConflictError(event.dedupeKey, '(earlier in the same publishMany call)');
      }
    });
    const rows = events.flatMap((event, index): Array<InsertedRow & { index: number }> =>
      event.dedupeKey !== null && firstIndex.get(event.dedupeKey) !== index ? [] : [{ index, id: uuidv7(), event }],
    );

    const results = new Array<PublishResult>(events.length);
    const existing = firstIndex.size === 0 ? NONE_STORED : await this.findByDedupeKeys(manager, [...firstIndex.keys()]);
    const fresh = rows.filter((row) => {
      const found = row.event.dedupeKey === null ? undefined : existing.get(row.event.dedupeKey);
      if (found) results[row.index] = this.resolveDuplicate(found, row.event);
      return !found;
    });

    const runner = manager.queryRunner!;
    const run = (statement: Statement) => this.runIn(manager, statement);
    const published = this.commits.published(runner);
    const ordered = this.keys.enabled ? fresh.filter((row) => this.keys.orders(row.event.topic, row.event.key)) : [];
    if (ordered.length > 0) await this.keys.place(run, ordered);
    for (const statement of insertStatements(fresh, this.dialect, this.table)) await run(statement);

    // A concurrent transaction may have committed the same dedupe key between the check and the
    // insert; ON CONFLICT DO NOTHING then skipped our row, so resolve it against the winner.
    const keyed = fresh.filter((row) => row.event.dedupeKey !== null);
    const winners = keyed.length
      ? await this.findByDedupeKeys(
          manager,
          keyed.map((r) => r.event.dedupeKey!),
          true,
        )
      : new Map<string, StoredEvent>();
    for (const row of fresh) {
      const key = row.event.dedupeKey;
      if (key === null) {
        results[row.index] = { id: row.id, inserted: true };
        continue;
      }
      // Our row or the one that won the key: neither found means the unique index took the key for
      // another, which the read-back by this exact key cannot see. Never report a row not written.
      const winner = winners.get(key);
      if (!winner) throw keyNotStored(key, [...winners.values()]);
      results[row.index] =
        winner.id === row.id ? { id: row.id, inserted: true } : this.resolveDuplicate(winner, row.event);
    }
    events.forEach((event, index) => {
      if (!results[index]) results[index] = { id: results[firstIndex.get(event.dedupeKey!)!].id, inserted: false };
    });
    // An ordered row another transaction's dedupe key kept out was placed in its key: if it became the
    // front, the front moves on to the key's next event.
    const lost = ordered.filter((row) => results[row.index].id !== row.id);
    if (lost.length > 0) {
      await this.keys.moveFronts(
        run,
        sortKeys(lost.map((row) => row.event.key!)),
        lost.map((row) => row.id),
      );
    }
    // Collected only while someone listens: the `published` event is built from it at the commit.
    if (this.events.observed) {
      const depth = transactionDepth(runner);
      for (const row of fresh) {
        if (results[row.index].id === row.id) published.push({ id: row.id, topic: row.event.topic, depth });
      }
    }
    return results;
  }

  private resolveDuplicate(stored: StoredEvent, event: ValidatedEvent): PublishResult {
    if (!sameStored(stored, event)) throw new OutboxDedupeConflictError(event.dedupeKey!, stored.id);
    return { id: stored.id, inserted: false };
  }

  private async findByDedupeKeys(
    manager: EntityManager,
    keys: string[],
    latest = false,
  ): Promise<Map<string, StoredEvent>> {
    const found = new Map<string, StoredEvent>();
    if (keys.length === 0) return found;
    const perStatement = this.dialect.maxParameters - 1;
    for (let i = 0; i < keys.length; i += perStatement) {
      const { rows } = await this.runIn(
        manager,
        this.dialect.selectByDedupeKeys(this.table, keys.slice(i, i + perStatement), latest),
      );
      for (const row of rows) {
        const event = this.dialect.decode(row);
        found.set(event.dedupeKey!, event);
      }
    }
    return found;
  }
}
