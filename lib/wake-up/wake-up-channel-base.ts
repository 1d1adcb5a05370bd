import { randomUUID } from 'node:crypto';
import type { OutboxWakeUpChannel, OutboxWakeUpReport, OutboxWakeUpSide } from '../interfaces/outbox-wake-up.interface';
import { NotifyWindow } from './notify-window';

/**
 * What every built-in wake-up channel shares: where it reports on its connections, the rule that a
 * listener (re)connected looks for work once, and its closed state. A channel adds how it listens and
 * how it closes; one that sends hints extends `HintSendingChannel`.
 */
export abstract class WakeUpChannelBase implements OutboxWakeUpChannel {
  private report: OutboxWakeUpReport | undefined;
  protected closed = false;

  start(report: OutboxWakeUpReport): void {
    this.report = report;
  }

  abstract notify(): void;
  abstract listen(wake: () => void): Promise<void>;
  abstract close(): Promise<void>;

  /** A side failed: `wake-up.lost` and the worker's log. Polling still delivers everything. */
  protected failed(error: unknown, side: OutboxWakeUpSide): void {
    this.report?.failed(error, side);
  }

  /** A side works (again): `wake-up.restored` after a failure. */
  protected working(side: OutboxWakeUpSide): void {
    this.report?.working(side);
  }

  /** Listening (again): reported, then one look for work, since hints sent while no one listened are gone. */
  protected listening(wake: () => void): void {
    this.working('listen');
    wake();
  }
}

/**
 * A channel whose `notify` sends a hint (NOTIFY, a broker message): one per window (`NotifyWindow`),
 * each carrying this instance's id so that its own listener ignores it; a failed send is reported,
 * never thrown.
 */
export abstract class HintSendingChannel extends WakeUpChannelBase {
  protected readonly sender = randomUUID();
  private readonly window = new NotifyWindow(() => this.sendReported());

  notify(): void {
    this.window.notify();
  }

  /** Sends one hint carrying `sender`; rejects when it could not. */
  protected abstract send(): Promise<void>;

  /** After a send that failed: drop what the next send should not reuse (a broken connection). */
  protected sendFailed(): void {}

  /** No hint is sent after this. */
  protected stopSending(): void {
    this.closed = true;
    this.window.close();
  }

  private async sendReported(): Promise<void> {
    try {
      await this.send();
      this.working('notify');
    } catch (error) {
      this.sendFailed();
      this.failed(error, 'notify');
    }
  }
}
