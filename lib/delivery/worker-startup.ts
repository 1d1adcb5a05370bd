import type { Logger } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { OutboxStore } from '../store/outbox.store';

/*
 * What the worker does once, as it starts: finds the scheduler it registers its intervals with, and sweeps
 * the ordered keys a crash left behind.
 */

/**
 * At start-up, in the background: ordered keys whose front finished without them move on (a crash
 * between the two; a dead head whose topic now skips dead heads). Logged; a failure too, and the next
 * start tries again.
 */
export function sweepKeyFronts(store: OutboxStore, logger: Logger, errorText: OutboxErrorText): void {
  store.sweepFronts().then(
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
