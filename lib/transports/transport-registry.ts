import type { Logger } from '@nestjs/common';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxHandlerFn } from '../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../interfaces/outbox-transport.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { describeValue } from '../utils/describe-value';
import { SendBatcher } from './send-batcher';

const TRANSPORT_NAME = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Checks the module's `transports` option: objects with a `send` method and unique, printable names. */
export function resolveTransports(value: unknown): OutboxTransport[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new OutboxConfigurationError('transports', `expected an array of transports, got ${describeValue(value)}`);
  }
  const names = new Set<string>();
  return value.map((entry: unknown, i) => {
    const where = `transports[${i}]`;
    const transport = entry as { name?: unknown; send?: unknown } | null;
    if (typeof transport !== 'object' || transport === null || typeof transport.send !== 'function') {
      throw new OutboxConfigurationError(where, 'expected an object with a name and a send(message, route) method');
    }
    const { name } = transport;
    if (typeof name !== 'string' || !TRANSPORT_NAME.test(name)) {
      throw new OutboxConfigurationError(
        `${where}.name`,
        `expected 1 to 64 characters of letters, digits and _ . : -, got ${describeValue(name)}`,
      );
    }
    if (names.has(name)) {
      throw new OutboxConfigurationError(`${where}.name`, `another transport is already named "${name}"`);
    }
    names.add(name);
    return transport as OutboxTransport;
  });
}

/**
 * The module's transports by name: how a route's events are sent (through one batcher per transport
 * that sends in batches), and the transports' own start and stop.
 */
export class TransportRegistry {
  private readonly logger: Logger;
  private readonly byName = new Map<string, OutboxTransport>();
  private readonly senders = new Map<
    string,
    (message: Parameters<OutboxHandlerFn>[0], route: OutboxRoute) => Promise<void>
  >();

  /** `errorText`: the module's, which describes and logs a transport's failure to stop. */
  constructor(
    transports: readonly OutboxTransport[],
    private readonly errorText: OutboxErrorText,
  ) {
    this.logger = errorText.logger('OutboxTransports');
    for (const transport of transports) this.byName.set(transport.name, transport);
  }

  /** The function that delivers an event along `route` (whose transport the options checked exists). */
  sender(route: OutboxRoute): OutboxHandlerFn {
    let send = this.senders.get(route.transport);
    if (!send) {
      const transport = this.byName.get(route.transport)!;
      if (transport.sendMany) {
        const batcher = new SendBatcher(transport.name, transport.sendMany.bind(transport));
        send = (message, r) => batcher.send(message, r);
      } else {
        send = (message, r) => transport.send(message, r);
      }
      this.senders.set(route.transport, send);
    }
    const deliver = send;
    return (message) => deliver(message, route);
  }

  /** Calls each transport's `onApplicationBootstrap`, in order; a failure stops the application's start. */
  async start(): Promise<void> {
    for (const transport of this.byName.values()) await transport.onApplicationBootstrap?.();
  }

  /** Calls each transport's `beforeApplicationShutdown`; a failure is logged and the others still stop. */
  async stop(): Promise<void> {
    for (const transport of this.byName.values()) {
      try {
        await transport.beforeApplicationShutdown?.();
      } catch (error) {
        this.logger.error(`Outbox transport ${transport.name} failed to stop: ${this.errorText.describe(error)}`);
      }
    }
  }
}
