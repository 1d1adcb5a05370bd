import type { OutboxMessage, OutboxRoute } from '../../lib';
import { InMemoryTransport } from '../../lib/transports/in-memory.transport';

const route: OutboxRoute = { topic: '#', transport: 'memory' };

function message(topic: string, id = `id-${topic}`): OutboxMessage {
  return {
    id,
    topic,
    key: null,
    payload: { topic },
    headers: { h: '1' },
    attempt: 1,
    createdAt: new Date('2024-05-01T12:00:00Z'),
    signal: new AbortController().signal,
  };
}

describe('InMemoryTransport', () => {
  it('records copies of what it sends, without the signal', async () => {
    const transport = new InMemoryTransport();
    const sent = message('order.placed');
    await transport.send(sent, route);
    sent.headers.h = 'changed';

    expect(transport.name).toBe('memory');
    expect(transport.sent).toEqual([
      {
        message: {
          id: 'id-order.placed',
          topic: 'order.placed',
          key: null,
          payload: { topic: 'order.placed' },
          headers: { h: '1' },
          attempt: 1,
          createdAt: new Date('2024-05-01T12:00:00Z'),
        },
        route,
      },
    ]);
    expect('signal' in transport.sent[0].message).toBe(false);
  });

  it('filters messages by exact topic, and clears', async () => {
    const transport = new InMemoryTransport('events');
    for (const topic of ['order.placed', 'order.paid', 'order.placed.eu', 'order.placed']) {
      await transport.send(message(topic), route);
    }
    expect(transport.messages()).toHaveLength(4);
    expect(transport.messages('order.placed').map((m) => m.topic)).toEqual(['order.placed', 'order.placed']);
    expect(transport.messages('order.*')).toEqual([]);
    transport.clear();
    expect(transport.messages()).toEqual([]);
  });

  it('fails the next sends on request, without recording them', async () => {
    const transport = new InMemoryTransport();
    const broker = new Error('broker down');
    transport.failNext(2, broker);
    transport.failNext();
    await expect(transport.send(message('a'), route)).rejects.toBe(broker);
    await expect(transport.send(message('b'), route)).rejects.toBe(broker);
    await expect(transport.send(message('c'), route)).rejects.toThrow('InMemoryTransport: simulated failure');
    await transport.send(message('d'), route);
    expect(transport.messages().map((m) => m.topic)).toEqual(['d']);
    expect(() => transport.failNext(-1)).toThrow(RangeError);
  });
});
