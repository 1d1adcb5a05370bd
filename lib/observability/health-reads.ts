import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';

/** What a read gave within its time: its value, its error, or nothing yet. */
export type Timed<T> = { answered: true; value: T } | { answered: false; error?: unknown };

/**
 * Waits for `read` at most `ms`. A read that is still running then goes on in the background (a
 * database that does not answer cannot be interrupted) and its late outcome is ignored.
 */
export function within<T>(read: Promise<T>, ms: number): Promise<Timed<T>> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ answered: false }), ms);
    timer.unref();
    read.then(
      (value) => {
        clearTimeout(timer);
        resolve({ answered: true, value });
      },
      (error: unknown) => {
        clearTimeout(timer);
        resolve({ answered: false, error });
      },
    );
  });
}

/**
 * One read of each kind at a time: a probe that comes while the previous one still waits for the
 * database waits for that same read, so a database that stopped answering is not sent a new query per
 * probe, each holding a pooled connection. A read still waiting after `shareMs` is left to settle on
 * its own and the next probe starts another: a connection that will never answer (a partition the
 * socket has not noticed) must not keep this instance down once the database is back.
 */
export class SingleReads {
  private readonly running = new Map<string, { read: Promise<unknown>; startedAt: number }>();

  constructor(private readonly shareMs: number) {}

  of<T>(name: string, read: () => Promise<T>): Promise<T> {
    const known = this.running.get(name);
    if (known && performance.now() - known.startedAt < this.shareMs) return known.read as Promise<T>;
    const started = { read: read(), startedAt: performance.now() };
    this.running.set(name, started);
    void started.read
      .finally(() => {
        if (this.running.get(name) === started) this.running.delete(name);
      })
      .catch(() => undefined);
    return started.read;
  }
}

/** When the outbox's state is `degraded`: each limit is optional, none makes this instance down. */
export interface OutboxStateLimits {
  /** Degraded when the oldest due event has waited longer than this, in ms (default 60,000). */
  maxOldestDueAgeMs?: number;
  /** Degraded when more events than this are dead-lettered (default: any number). */
  maxDeadLetters?: number;
  /** Degraded when more keys than this are blocked by a dead head (default: any number). */
  maxBlockedKeys?: number;
}

const DEFAULT_MAX_OLDEST_DUE_AGE_MS = 60_000;
export const DEFAULT_HEALTH_TIMEOUT_MS = 3_000;
/** How long probes wait for the same read of a database that does not answer, before starting another. */
export const SHARED_READ_MS = 30_000;

/** The sentences that make the state degraded, one per limit passed; empty when none is. */
export function stateWarnings(stats: OutboxStats, limits: OutboxStateLimits): string[] {
  const maxAge = checkLimit('maxOldestDueAgeMs', limits.maxOldestDueAgeMs ?? DEFAULT_MAX_OLDEST_DUE_AGE_MS);
  const maxDead = optionalLimit('maxDeadLetters', limits.maxDeadLetters);
  const maxBlocked = optionalLimit('maxBlockedKeys', limits.maxBlockedKeys);
  const warnings: string[] = [];
  const age = stats.oldestDueAgeMs;
  if (age !== null && age > maxAge) warnings.push(`the oldest due event has waited ${age} ms (more than ${maxAge})`);
  if (maxDead !== undefined && stats.dead > maxDead) {
    warnings.push(`${count(stats.dead, 'dead letter')} (more than ${maxDead})`);
  }
  if (maxBlocked !== undefined && stats.blockedKeys > maxBlocked) {
    warnings.push(`${count(stats.blockedKeys, 'blocked key')} (more than ${maxBlocked})`);
  }
  return warnings;
}

/** Checks every limit at once, so a bad one throws even when the database does not answer. */
export function checkLimits(limits: OutboxStateLimits & { timeoutMs?: number }): number {
  stateWarnings({ oldestDueAgeMs: null, dead: 0, blockedKeys: 0 } as OutboxStats, limits);
  const timeoutMs = limits.timeoutMs ?? DEFAULT_HEALTH_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new OutboxConfigurationError('health.timeoutMs', `expected a number of ms above 0, got ${String(timeoutMs)}`);
  }
  return timeoutMs;
}

function optionalLimit(name: string, value: number | undefined): number | undefined {
  return value === undefined ? undefined : checkLimit(name, value);
}

function checkLimit(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) {
    throw new OutboxConfigurationError(`health.${name}`, `expected a number of 0 or more, got ${String(value)}`);
  }
  return value;
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
