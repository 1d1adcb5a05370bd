import { Inject, Injectable } from '@nestjs/common';
import { OUTBOX_OPTIONS } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import { OutboxOperations } from '../operations/outbox-operations.service';
import { OutboxWorker } from '../delivery/outbox.worker';
import { describeError } from '../utils/describe-error';

/** When `OutboxHealthIndicator.isHealthy()` reports the outbox down. */
export interface OutboxHealthThresholds {
  /** Down when the oldest due event has waited longer than this, in ms (default 60,000). */
  maxOldestDueAgeMs?: number;
  /** Down when more events than this are dead-lettered (default: any number). */
  maxDeadLetters?: number;
}

/** What the indicator found, as `@nestjs/terminus` shows it under the indicator's key. */
export interface OutboxHealthDetails {
  status: 'up' | 'down';
  /** Whether `stats()` could be read: every other figure comes from it. */
  database: 'up' | 'down';
  /** This instance's worker: `disabled` with `worker.enabled: false` (another instance delivers). */
  worker: 'running' | 'stopped' | 'disabled';
  due?: number;
  inFlight?: number;
  dead?: number;
  blockedKeys?: number;
  oldestDueAgeMs?: number | null;
  /** When a worker of any instance last claimed an event (ISO-8601), or null. */
  lastClaimAt?: string | null;
  /** Why it is down, one sentence each. */
  problems?: string[];
}

/** A result under the indicator's key: `@nestjs/terminus`'s `HealthIndicatorResult`. */
export type OutboxHealthResult<Key extends string = string> = Record<Key, OutboxHealthDetails>;

const DEFAULT_MAX_OLDEST_DUE_AGE_MS = 60_000;

/**
 * A health indicator for `@nestjs/terminus` (10.1 and later), with no import of it: its result is the
 * plain object terminus reads, `down` when the database cannot be read, this instance's worker is not
 * running, the oldest due event waited too long, or dead letters are too many. The figures come from
 * the database (`OutboxOperations.stats()`), so an instance whose own worker is off still reports a
 * backlog that no worker anywhere is delivering.
 */
@Injectable()
export class OutboxHealthIndicator {
  constructor(
    private readonly operations: OutboxOperations,
    private readonly worker: OutboxWorker,
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  async isHealthy<const Key extends string = 'outbox'>(
    key: Key = 'outbox' as Key,
    thresholds: OutboxHealthThresholds = {},
  ): Promise<OutboxHealthResult<Key>> {
    const maxAge = checkLimit('maxOldestDueAgeMs', thresholds.maxOldestDueAgeMs ?? DEFAULT_MAX_OLDEST_DUE_AGE_MS);
    const maxDead =
      thresholds.maxDeadLetters === undefined ? undefined : checkLimit('maxDeadLetters', thresholds.maxDeadLetters);
    const worker = !this.options.worker.enabled ? 'disabled' : this.worker.running ? 'running' : 'stopped';
    const problems: string[] = [];
    if (worker === 'stopped') problems.push("this instance's worker is not running");
    let details: OutboxHealthDetails;
    try {
      const stats = await this.operations.stats();
      const age = stats.oldestDueAgeMs;
      if (age !== null && age > maxAge)
        problems.push(`the oldest due event has waited ${age} ms (more than ${maxAge})`);
      if (maxDead !== undefined && stats.dead > maxDead)
        problems.push(`${stats.dead} dead letters (more than ${maxDead})`);
      details = {
        status: 'up',
        database: 'up',
        worker,
        due: stats.due,
        inFlight: stats.inFlight,
        dead: stats.dead,
        blockedKeys: stats.blockedKeys,
        oldestDueAgeMs: age,
        lastClaimAt: stats.lastClaimAt?.toISOString() ?? null,
      };
    } catch (error) {
      problems.push(`the outbox table cannot be read: ${this.options.redactError(describeError(error))}`);
      details = { status: 'down', database: 'down', worker };
    }
    if (problems.length > 0) details = { ...details, status: 'down', problems };
    return { [key]: details } as OutboxHealthResult<Key>;
  }
}

function checkLimit(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) {
    throw new OutboxConfigurationError(`health.${name}`, `expected a number of 0 or more, got ${String(value)}`);
  }
  return value;
}
