import { Injectable } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { backends } from '../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../fixtures/test-app';

@Injectable()
class Recorder {
  readonly seen: OutboxMessage[] = [];
  @OutboxHandler('order.placed')
  async onPlaced(message: OutboxMessage) {
    this.seen.push(message);
  }
}

describe.each(backends())('smoke on %s', (backend) => {
  let app: TestApp;
  beforeEach(async () => {
    app = await createTestApp({ backend, providers: [Recorder] });
  });
  afterEach(() => app.dispose());

  it('publishes in a transaction and delivers', async () => {
    const result = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', { n: 1 }));
    expect(result.inserted).toBe(true);
    const drained = await app.worker.drain();
    expect(drained.delivered).toBe(1);
    const rec = app.module.get(Recorder);
    expect(rec.seen.map((m) => m.payload)).toEqual([{ n: 1 }]);
    const rows = await outboxRows(app);
    expect(rows[0].status).toBe('delivered');
  });
});
