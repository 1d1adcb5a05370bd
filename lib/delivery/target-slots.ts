import type { DeliveryTarget } from './delivery-targets';
import type { TargetBound } from './target-bound';

const NONE: readonly DeliveryTarget[] = [];

/**
 * Whether a share that found every slot of its target taken waits on its lane for one: when the target's
 * calls are short, or when no other target wants a lane.
 */
function waits(bound: TargetBound): boolean {
  return bound.worthWaiting() || !bound.lanesWanted();
}

/**
 * The slots of `targets` for one event: each runs at most its `concurrency` calls at once. `now`: those
 * that run in this attempt, at once or (`slots[i]`) once a call of theirs ends (soon, or while no other
 * target wants the lane); `full`: those whose calls are long and every slot taken while other targets
 * have work, whose share waits in the table while the others are delivered.
 * The calls with a slot start at once, never behind a wait: no slot is held by a call waiting for another.
 */
export function takeSlots(targets: readonly DeliveryTarget[]): {
  now: readonly DeliveryTarget[];
  slots: Array<Promise<void> | undefined> | undefined;
  full: readonly DeliveryTarget[];
} {
  if (targets.length === 1) {
    const { bound } = targets[0];
    if (bound.take()) return { now: targets, slots: undefined, full: NONE };
    return waits(bound)
      ? { now: targets, slots: [bound.wait()], full: NONE }
      : { now: NONE, slots: undefined, full: targets };
  }
  const now: DeliveryTarget[] = [];
  const slots: Array<Promise<void> | undefined> = [];
  const full: DeliveryTarget[] = [];
  for (const target of targets) {
    const { bound } = target;
    if (bound.take()) slots.push(undefined);
    else if (waits(bound)) slots.push(bound.wait());
    else {
      full.push(target);
      continue;
    }
    now.push(target);
  }
  return { now, slots, full };
}
