/**
 * An AbortSignal made on first use: most handlers never read `message.signal`, and creating one per
 * call was the largest cost of a fast drain.
 */
export class LazyAbort {
  private controller: AbortController | undefined;
  private reason: unknown;
  private aborted = false;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /**
   * Set by a transactional handler once it has returned and begins to commit: its outcome is then the
   * commit's, which a timeout or a lost lease no longer cuts short (the commit is fenced by the claim).
   */
  committing = false;

  /** Set by the run this belongs to: told to end the wait for its outcome at once, with `reason`. */
  onGiveUp: { gaveUp(reason: unknown): void } | undefined;

  /** Why it was aborted, once it was: a call that has not started yet then never starts. */
  get abortedWith(): { reason: unknown } | undefined {
    return this.aborted ? { reason: this.reason } : undefined;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }

  /**
   * Aborts the signal and stops waiting for the run: its outcome can no longer be written (the lease
   * was lost), so its lane need not wait for a handler that ignores its signal.
   */
  giveUp(reason: unknown): void {
    this.abort(reason);
    this.onGiveUp?.gaveUp(reason);
  }
}
