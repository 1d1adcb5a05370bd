import { performance } from 'node:perf_hooks';

/** One watched handler call: removed when it ends, expired when its deadline passes first. */
export interface Watch {
  /** Ends the watch without expiring it. Safe to call more than once. */
  end(): void;
}

/** What a watch expires: told once, when its deadline passes before the watch ends. */
export interface Expiring {
  expire(): void;
}

class WatchEntry implements Watch {
  prev: WatchEntry | undefined;
  next: WatchEntry | undefined;
  live = true;

  constructor(
    readonly list: WatchList,
    readonly deadline: number,
    readonly target: Expiring,
  ) {}

  end(): void {
    if (!this.live) return;
    this.live = false;
    this.list.unlink(this);
  }
}

/** The calls of one timeout length: started in order, so their deadlines are in order too. */
class WatchList {
  head: WatchEntry | undefined;
  tail: WatchEntry | undefined;

  constructor(private readonly owner: HandlerWatchdog) {}

  push(entry: WatchEntry): void {
    entry.prev = this.tail;
    if (this.tail) this.tail.next = entry;
    else this.head = entry;
    this.tail = entry;
  }

  unlink(entry: WatchEntry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.tail = entry.prev;
    entry.prev = entry.next = undefined;
    this.owner.ended();
  }
}

/**
 * Every handler call's time limit on one timer. A timer and a promise race per call was the largest
 * fixed cost of a fast drain; here a call costs one list entry, removed in O(1) when it ends. Calls
 * are kept in one list per timeout length, where deadlines follow start order, and the single timer
 * is armed for the earliest head.
 */
export class HandlerWatchdog {
  private readonly lists = new Map<number, WatchList>();
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (performance.now()), if armed. */
  private armedFor = Infinity;
  private live = 0;

  /** Tells `target` to expire once `timeoutMs` have passed, unless the returned watch ends first. */
  watch(timeoutMs: number, target: Expiring): Watch {
    let list = this.lists.get(timeoutMs);
    if (!list) this.lists.set(timeoutMs, (list = new WatchList(this)));
    const entry = new WatchEntry(list, performance.now() + timeoutMs, target);
    list.push(entry);
    if (this.live++ === 0) this.timer?.ref();
    if (entry.deadline < this.armedFor) this.arm(entry.deadline);
    return entry;
  }

  /**
   * A watch was removed. With none left the timer stays armed, unreferenced, so it keeps no process
   * alive: calls that end at once (a handler with nothing to await) would otherwise set and clear a
   * timer each. It finds nothing to expire when it fires, and stops.
   */
  ended(): void {
    if (--this.live === 0) this.timer?.unref();
  }

  private arm(deadline: number): void {
    clearTimeout(this.timer);
    this.armedFor = deadline;
    this.timer = setTimeout(() => this.fire(), Math.max(0, Math.ceil(deadline - performance.now())));
    if (this.live === 0) this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = performance.now();
    const expired: WatchEntry[] = [];
    let next = Infinity;
    for (const list of this.lists.values()) {
      while (list.head && list.head.deadline <= now) {
        const entry = list.head;
        entry.end();
        expired.push(entry);
      }
      if (list.head && list.head.deadline < next) next = list.head.deadline;
    }
    if (next < Infinity) this.arm(next);
    // After the bookkeeping: an expiry may start new calls (and so new watches).
    for (const entry of expired) entry.target.expire();
  }
}
