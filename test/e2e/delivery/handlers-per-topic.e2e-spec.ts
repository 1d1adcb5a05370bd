import { OutboxOperations } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { Handlers, workerApps } from '../../fixtures/worker-app';

describe.each(backends())('the handlers of a topic on %s', (backend) => {
  const start = workerApps(backend);

  it('logs one line per registered handler', async () => {
    const { app } = await start();
    expect(app.logger.matching(/^Outbox handler Handlers\.first \{multi\}$/)).toHaveLength(1);
    // Every method of Handlers is a handler of one topic.
    const methods = Object.getOwnPropertyNames(Handlers.prototype).filter((name) => name !== 'constructor');
    expect(app.logger.matching(/^Outbox handler /)).toHaveLength(methods.length);
  });

  it('records each handler of a topic on its own: a retry runs only the one that failed', async () => {
    const { app, b, publish, row } = await start();
    const { id } = await publish('multi', { n: 1 });
    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 1, failed: 1 });
    expect(b.calls.map((c) => `${c.handler}@${c.message.attempt}`)).toEqual(['first@1', 'second@1', 'second@2']);
    const stored = await row(id);
    expect(stored.status).toBe('delivered');
    expect(stored.attempts).toBe(2);
  });

  it("says in an event's view which targets succeeded in an earlier attempt, and none for one delivered at once", async () => {
    const { app, publish } = await start();
    const { id } = await publish('multi', { n: 1 });
    const { id: plainId } = await publish('plain');
    expect(await app.worker.drain()).toMatchObject({ delivered: 2 });
    const operations = app.module.get(OutboxOperations);
    expect(await operations.get(id)).toMatchObject({ status: 'delivered', succeededEarlier: ['Handlers.first'] });
    expect(await operations.get(plainId)).toMatchObject({ status: 'delivered', succeededEarlier: [] });
  });

  it('gives every handler of a topic its own copy of the payload and headers', async () => {
    const { app, b, publish } = await start();
    await publish('copied', { items: ['a'] }, { headers: { 'x-trace': 't' } });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(b.seen).toHaveLength(2);
    for (const seen of b.seen) {
      expect(seen.payload).toEqual({ items: ['a'] });
      expect(seen.headers).toEqual({ 'x-trace': 't' });
    }
  });
});
