/**
 * The worker's `concurrency` delivery lanes, shared by every claim it runs at once: an event starts when
 * a lane is free, in the order the events asked for one. A crash suspect asks for every lane, so it
 * runs with nothing else; the requests behind it wait until it is done.
 */
export class Lanes {
  private busy = 0;
  private readonly queue: Array<{ count: number; start: () => void }> = [];

  constructor(
    readonly size: number,
    /** Told whenever a lane is given back. */
    private readonly onGiven: () => void,
  ) {}

  /** Lanes no event holds or has been promised. */
  get free(): number {
    return this.size - this.busy;
  }

  /**
   * One lane, or with `whole` all of them. Taken at once (`undefined`) when free and nothing asked
   * before; else the promise resolves once they are this request's.
   */
  take(whole = false): Promise<void> | undefined {
    if (this.takeNow(whole)) return undefined;
    return new Promise((resolve) => this.queue.push({ count: whole ? this.size : 1, start: resolve }));
  }

  /**
   * `take(false)` without a promise: calls `start` once a lane is this request's — at once when one is
   * free and nothing asked before, else from the `give` that hands it over.
   */
  whenFree(start: () => void): void {
    if (this.takeNow(false)) start();
    else this.queue.push({ count: 1, start });
  }

  private takeNow(whole: boolean): boolean {
    const count = whole ? this.size : 1;
    if (this.queue.length > 0 || this.busy + count > this.size) return false;
    this.busy += count;
    return true;
  }

  /** Gives back what `take(whole)` gave, and hands it on to the requests waiting, first come first served. */
  give(whole = false): void {
    this.busy -= whole ? this.size : 1;
    while (this.queue.length > 0 && this.busy + this.queue[0].count <= this.size) {
      const next = this.queue.shift()!;
      this.busy += next.count;
      next.start();
    }
    this.onGiven();
  }
}
