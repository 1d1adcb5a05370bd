/** Which broker a `ClientProxy` talks to, by its class (the package is an optional peer: no instanceof). */
export type Broker = 'rmq' | 'nats' | 'mqtt' | 'kafka' | 'redis' | 'other';

const CLIENT_CLASSES: Record<string, Broker> = {
  ClientRMQ: 'rmq',
  ClientNats: 'nats',
  ClientMqtt: 'mqtt',
  ClientKafka: 'kafka',
  ClientRedis: 'redis',
};

export function brokerOf(client: object): Broker {
  const parent = (of: object) => Object.getPrototypeOf(of) as object | null;
  for (let proto = parent(client); proto && proto !== Object.prototype; proto = parent(proto)) {
    const broker = CLIENT_CLASSES[(proto as { constructor?: { name?: string } }).constructor?.name ?? ''];
    if (broker) return broker;
  }
  return 'other';
}
