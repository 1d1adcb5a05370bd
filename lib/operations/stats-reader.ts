import { toDate } from '../dialects/shared/outbox-columns';
import type { Statement } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxEventState, OutboxStats, OutboxTopicStats } from '../interfaces/outbox-operations.interface';
import type { OutboxStore } from '../store/outbox.store';
import type { OperationsStatements } from './operations-statements';

/** Tables the database estimates under this many rows have their delivered rows counted exactly (a few ms). */
const EXACT_COUNT_BELOW = 100_000;

/** `OutboxOperations.stats()`: the figures, each read by the database through its indexes. */
export class StatsReader {
  constructor(
    private readonly store: OutboxStore,
    private readonly sql: OperationsStatements,
  ) {}

  async read(exactAsked: boolean): Promise<OutboxStats> {
    const run = (statement: Statement) => this.store.executor.run(statement).then((result) => result.rows);
    const estimate = this.store.dialect.flavor.rowEstimate?.(this.store.table);
    const [open, recent, clockRows, estimated, blocked] = await Promise.all([
      run(this.sql.openCountsByTopic()),
      run(this.sql.recentDeliveries()),
      run(this.sql.clock()),
      estimate ? run(estimate) : Promise.resolve([]),
      run(this.store.keys.statements.blockedKeys('count')),
    ]);
    const estimatedRows = estimated.length > 0 && estimated[0].n != null ? Number(estimated[0].n) : undefined;
    const exact = exactAsked || estimatedRows === undefined || estimatedRows < EXACT_COUNT_BELOW;

    const byTopic = new Map<string, OutboxTopicStats>();
    const topic = (name: unknown) => {
      const key = String(name);
      let stats = byTopic.get(key);
      if (!stats) {
        stats = { topic: key, due: 0, scheduled: 0, inFlight: 0, dead: 0, delivered: exact ? 0 : null };
        byTopic.set(key, stats);
      }
      return stats;
    };
    for (const row of open) topic(row.topic)[statsField(String(row.op_state) as OutboxEventState)] += Number(row.n);
    const all = [...byTopic.values()];
    const sum = (field: 'due' | 'scheduled' | 'inFlight' | 'dead') =>
      all.reduce((total, stats) => total + stats[field], 0);
    let delivered: number;
    if (exact) {
      for (const row of await run(this.sql.deliveredByTopic())) topic(row.topic).delivered = Number(row.n);
      delivered = [...byTopic.values()].reduce((total, stats) => total + (stats.delivered ?? 0), 0);
    } else {
      delivered = Math.max(0, estimatedRows - sum('due') - sum('scheduled') - sum('inFlight') - sum('dead'));
    }
    const clock = clockRows[0] ?? {};
    return {
      at: toDate(clock.at),
      due: sum('due'),
      scheduled: sum('scheduled'),
      inFlight: sum('inFlight'),
      dead: sum('dead'),
      delivered,
      deliveredExact: exact,
      byTopic: [...byTopic.values()].sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : 0)),
      blockedKeys: Number(blocked[0]?.n ?? 0),
      oldestDueAgeMs: clock.oldest_due_ms == null ? null : Math.max(0, Number(clock.oldest_due_ms)),
      lastClaimAt: await this.lastClaim(clock),
      deliveredLastMinute: Number(recent[0]?.minute ?? 0),
      deliveredLastHour: Number(recent[0]?.hour ?? 0),
    };
  }

  /**
   * The latest claim of any event: that of an unfinished one, or of one finished since the latest claim
   * known so far (an event claimed later finished later still), found through the retention index.
   */
  private async lastClaim(clock: Record<string, unknown>): Promise<Date | null> {
    const known = [clock.open_claim, clock.delivered_claim, clock.dead_claim].filter((v) => v != null).map(toDate);
    if (known.length === 0) return null;
    const since = new Date(Math.max(...known.map((d) => d.getTime())));
    const [row] = (await this.store.executor.run(this.sql.lastClaimSince(since))).rows;
    return row?.last_claim_at == null || toDate(row.last_claim_at) < since ? since : toDate(row.last_claim_at);
  }
}

function statsField(state: OutboxEventState): 'due' | 'scheduled' | 'inFlight' | 'dead' {
  if (state === 'in_flight') return 'inFlight';
  if (state === 'due' || state === 'scheduled' || state === 'dead') return state;
  throw new Error(`unexpected event state "${String(state)}" from the database`);
}
