import { Injectable } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { OUTBOX_STORE } from '../outbox.constants';
import { OutboxStore } from './outbox.store';

/**
 * What a refused start-up leaves open. Nest runs no shutdown hook after a failed init, and
 * `createApplicationContext()` returns no application to close, so a pool or a wake-up channel left
 * open keeps the process alive (for ever on MySQL/MariaDB). Once any outbox refuses, the application
 * will not start and no outbox of it can be used: each one's DataSource and channel are closed.
 */
@Injectable()
export class StartRefusal {
  constructor(private readonly discovery: DiscoveryService) {}

  /** Runs a start-up step; when it throws, closes what every outbox of the application opened, then rethrows. */
  async guard<T>(step: () => T | Promise<T>): Promise<T> {
    try {
      return await step();
    } catch (error) {
      await this.closeEveryOutbox();
      throw error;
    }
  }

  private async closeEveryOutbox(): Promise<void> {
    for (const wrapper of this.discovery.getProviders()) {
      // One at a time: two outboxes may share a DataSource, which is destroyed once.
      if (wrapper.token === OUTBOX_STORE && wrapper.instance instanceof OutboxStore)
        await wrapper.instance.closeRefused();
    }
  }
}

/**
 * The options of `forRootAsync` are checked when Nest runs the factory, once the DataSource has been
 * opened and before any outbox hook runs: a refusal then closes that DataSource itself.
 */
export function resolvingOrClosing<T>(resolve: () => T, dataSource: DataSource | undefined): Promise<T> {
  try {
    return Promise.resolve(resolve());
  } catch (error) {
    const closed = dataSource?.isInitialized ? dataSource.destroy().catch(() => undefined) : Promise.resolve();
    return closed.then(() => Promise.reject(error as Error));
  }
}
