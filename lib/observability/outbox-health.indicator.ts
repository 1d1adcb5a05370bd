import { Inject, Injectable } from '@nestjs/common';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';
import { OutboxOperations } from '../operations/outbox-operations.service';
import { OutboxWorker } from '../delivery/outbox.worker';
import type { OutboxStore } from '../store/outbox.store';
import {
  checkLimits,
  SHARED_READ_MS,
  SingleReads,
  stateWarnings,
  within,
  type OutboxStateLimits,
  type Timed,
} from './health-reads';

export type { OutboxStateLimits } from './health-reads';

/** `isHealthy()`'s options: how long the database may take, and the limits its `state` is judged by. */
export interface OutboxHealthOptions extends OutboxStateLimits {
  /** How long the database may take to answer, in ms (default 3,000): past it, this instance is down. */
  timeoutMs?: number;
}

/** The options of earlier versions, under their name: the limits now mark the state, never the instance. */
export type OutboxHealthThresholds = OutboxHealthOptions;

/** What a check found, as `@nestjs/terminus` shows it under the check's key. */
export interface OutboxHealthDetails {
  status: 'up' | 'down';
  /** Whether the outbox table answered within `timeoutMs`. */
  database: 'up' | 'down';
  /** This instance's worker: `disabled` with `worker.enabled: false` (another instance delivers). */
  worker?: 'running' | 'stopped' | 'disabled';
  /** The outbox's state by its limits; `unknown` when the figures were not read in time. */
  state: 'ok' | 'degraded' | 'unknown';
  due?: number;
  inFlight?: number;
  dead?: number;
  blockedKeys?: number;
  oldestDueAgeMs?: number | null;
  /** When a worker of any instance last claimed an event (ISO-8601), or null. */
  lastClaimAt?: string | null;
  /** Why the check is down, one sentence each. */
  problems?: string[];
  /** Why the state is degraded or unknown, one sentence each (`isHealthy()`: never down for them). */
  warnings?: string[];
}

/** A result under the check's key: `@nestjs/terminus`'s `HealthIndicatorResult`. */
export type OutboxHealthResult<Key extends string = string> = Record<Key, OutboxHealthDetails>;

/**
 * Health checks for `@nestjs/terminus` (10.1 and later), with no import of it: each returns the plain
 * object terminus reads. `isHealthy()` is this instance's health — its database answers within a
 * timeout, its worker runs — for readiness and liveness probes: the outbox's state (backlog, dead
 * letters, blocked keys) is the same on every replica, so it is only reported there, as `state`.
 * `checkState()` is down on that state, for an endpoint that alerts, never for a probe.
 */
@Injectable()
export class OutboxHealthIndicator {
  private readonly reads = new SingleReads(SHARED_READ_MS);

  constructor(
    private readonly operations: OutboxOperations,
    private readonly worker: OutboxWorker,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  /**
   * Down when the outbox table does not answer within `timeoutMs`, or this instance's worker was
   * started and no longer runs; never for the outbox's state, which the details carry.
   */
  async isHealthy<const Key extends string = 'outbox'>(
    key: Key = 'outbox' as Key,
    options: OutboxHealthOptions = {},
  ): Promise<OutboxHealthResult<Key>> {
    const timeoutMs = checkLimits(options);
    const worker = !this.options.worker.enabled ? 'disabled' : this.worker.running ? 'running' : 'stopped';
    const [reached, stats] = await Promise.all([this.reach(timeoutMs), this.stats(timeoutMs)]);
    const problems: string[] = [];
    if (!reached.answered)
      problems.push(this.unanswered(reached, 'the database did not answer', 'the outbox table', timeoutMs));
    if (worker === 'stopped') problems.push("this instance's worker is not running");
    const details: OutboxHealthDetails = {
      status: problems.length > 0 ? 'down' : 'up',
      database: reached.answered ? 'up' : 'down',
      worker,
      ...this.state(stats, options, timeoutMs),
    };
    if (problems.length > 0) details.problems = problems;
    return { [key]: details } as OutboxHealthResult<Key>;
  }

  /**
   * The outbox's state, from the database: down when a limit is passed or the figures cannot be read
   * within `timeoutMs`. The same on every instance — for alerting, not for a probe.
   */
  async checkState<const Key extends string = 'outboxState'>(
    key: Key = 'outboxState' as Key,
    options: OutboxHealthOptions = {},
  ): Promise<OutboxHealthResult<Key>> {
    const timeoutMs = checkLimits(options);
    const stats = await this.stats(timeoutMs);
    const { warnings, ...state } = this.state(stats, options, timeoutMs);
    const details: OutboxHealthDetails = {
      status: warnings ? 'down' : 'up',
      database: stats.answered ? 'up' : 'down',
      ...state,
    };
    if (warnings) details.problems = warnings;
    return { [key]: details } as OutboxHealthResult<Key>;
  }

  /** One row of the table, at most: it answers when the database does and the table can be read. */
  private reach(timeoutMs: number): Promise<Timed<unknown>> {
    const sql = `SELECT 1 FROM ${this.store.dialect.flavor.table(this.store.table)} LIMIT 1`;
    return within(
      this.reads.of('reach', () => this.store.executor.run({ sql, params: [] })),
      timeoutMs,
    );
  }

  private stats(timeoutMs: number): Promise<Timed<OutboxStats>> {
    return within(
      this.reads.of('stats', () => this.operations.stats()),
      timeoutMs,
    );
  }

  private state(
    stats: Timed<OutboxStats>,
    limits: OutboxStateLimits,
    timeoutMs: number,
  ): Omit<OutboxHealthDetails, 'status' | 'database' | 'worker'> {
    if (!stats.answered) {
      return {
        state: 'unknown',
        warnings: [this.unanswered(stats, 'the figures were not read', 'the figures', timeoutMs)],
      };
    }
    const read = stats.value;
    const warnings = stateWarnings(read, limits);
    return {
      state: warnings.length > 0 ? 'degraded' : 'ok',
      due: read.due,
      inFlight: read.inFlight,
      dead: read.dead,
      blockedKeys: read.blockedKeys,
      oldestDueAgeMs: read.oldestDueAgeMs,
      lastClaimAt: read.lastClaimAt?.toISOString() ?? null,
      ...(warnings.length > 0 ? { warnings } : {}),
    };
  }

  /** Why a read gave nothing: it failed, saying why, or is still waiting for the database. */
  private unanswered(read: Timed<unknown>, late: string, what: string, timeoutMs: number): string {
    if (read.answered || !('error' in read)) return `${late} within ${timeoutMs} ms`;
    return `${what} cannot be read: ${this.options.errorText.describe(read.error)}`;
  }
}
