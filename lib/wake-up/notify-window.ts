/**
 * At most one notification per window: the first commit after a quiet spell notifies at once, later
 * ones in the window share one sent at its end. Bounds a wake-up channel's cost under load to a few
 * hundred tiny messages a second, and the delay it adds to the window.
 */
export const NOTIFY_WINDOW_MS = 10;

const RECONNECT_MS = [100, 250, 500, 1000, 2000, 5000];

/** How long a listener waits before its `attempt`-th try to get its connection back (0 first). */
export const reconnectDelay = (attempt: number): number => RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)];

/**
 * Coalesces `notify()` calls into sends of `send`, one at a time and one per window. `send` must not
 * reject (a channel reports its own errors).
 */
export class NotifyWindow {
  private sending = false;
  private dirty = false;
  private lastSent = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly send: () => Promise<void>,
    private readonly windowMs = NOTIFY_WINDOW_MS,
  ) {}

  notify(): void {
    if (this.closed) return;
    this.dirty = true;
    if (this.sending || this.timer) return;
    const wait = this.lastSent + this.windowMs - Date.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        void this.flush();
      }, wait);
      this.timer.unref();
      return;
    }
    void this.flush();
  }

  /** Sends once for every notify since the last send; then, if more came meanwhile, schedules again. */
  private async flush(): Promise<void> {
    if (this.closed || !this.dirty) return;
    this.dirty = false;
    this.sending = true;
    this.lastSent = Date.now();
    try {
      await this.send();
    } finally {
      this.sending = false;
    }
    if (this.dirty) this.notify();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
