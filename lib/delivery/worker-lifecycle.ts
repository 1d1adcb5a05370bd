import type { Logger } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { DeliveryState } from './delivery-state';
import type { ResolvedKeyOrder } from '../interfaces/outbox-ordering.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { OutboxStore } from '../store/outbox.store';

/**
 * Says, as shutdown begins, what it waits for when anything runs (the handlers running, the claimed
 * events not started, which go back); returns what says, at the end, what became of them.
 */
export function shutdownReport(state: DeliveryState, logger: Logger, timeoutMs: number): (finished: boolean) => void {
  const { inFlight, waiting, totals } = state;
  if (inFlight.size + waiting.size === 0) return () => undefined;
  const started = Date.now();
  const runs = [...totals];
  const sum = (key: 'delivered' | 'released') => runs.reduce((n, total) => n + total[key], 0);
  const before = { delivered: sum('delivered'), released: sum('released') };
  logger.log(
    `Shutdown: waiting up to ${timeoutMs} ms for ${inFlight.size} running handler(s); ` +
      `${waiting.size} claimed event(s) not started go back to the outbox`,
  );
  return (finished) =>
    logger.log(
      `Shutdown ${finished ? 'finished' : 'stopped waiting'} after ${Date.now() - started} ms: ` +
        `${sum('delivered') - before.delivered} event(s) delivered, ${sum('released') - before.released} released`,
    );
}

/**
 * At start-up, in the background: ordered keys whose front finished without them move on (a crash
 * between the two; a dead head whose topic now skips dead heads). Logged; a failure too, and the next
 * start tries again.
 */
export function sweepKeyFronts(
  store: OutboxStore,
  ordering: ResolvedKeyOrder,
  logger: Logger,
  errorText: OutboxErrorText,
): void {
  store
    .sweepFronts((topic) => ordering.skipsDeadHead(topic))
    .then(
      (moved) => {
        if (moved > 0) logger.log(`Outbox: ${moved} ordered key(s) whose first event had finished went on`);
      },
      (error) => logger.error(`Outbox sweep of the ordered keys failed: ${errorText.describe(error)}`),
    );
}

/**
 * The application's `SchedulerRegistry`, or, when it did not import `ScheduleModule.forRoot()`, one of
 * the worker's own: it is scheduled the same way without importing a second orchestrator.
 */
export function schedulerRegistryOf(moduleRef: ModuleRef): SchedulerRegistry {
  try {
    return moduleRef.get(SchedulerRegistry, { strict: false });
  } catch {
    return new SchedulerRegistry();
  }
}
