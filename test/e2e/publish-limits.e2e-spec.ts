import { Injectable } from '@nestjs/common';
import { OutboxHandler, OutboxValidationError, type OutboxMessage } from '../../lib';
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

const rocket = '🚀';
const high = rocket.slice(0, 1);
const low = rocket.slice(1);

describe.each(backends())('strings the databases cannot take, on %s', (backend) => {
  let app: TestApp;
  let recorder: Recorder;
  beforeEach(async () => {
    app = await createTestApp({ backend, providers: [Recorder] });
    recorder = app.module.get(Recorder);
  });
  afterEach(() => app.dispose());

  const orderCount = async () =>
    Number((await app.raw.query<{ n: number }>(`SELECT count(*) AS n FROM "${app.ordersTable}"`))[0].n);

  it('refuses a lone surrogate in a payload, a key of it, or a header before any SQL; the transaction goes on', async () => {
    const refused = await app.txHost.withTransaction(async () => {
      const errors = [];
      for (const [payload, headers] of [
        [`cut ${high}`, undefined],
        [{ deep: [{ text: `${low} cut` }] }, undefined],
        [{ [`name ${high}`]: 1 }, undefined],
        [{}, { 'x-title': `cut ${high}` }],
      ] as const) {
        errors.push(await app.outbox.publish('order.placed', payload, { headers }).catch((e: unknown) => e));
      }
      // On PostgreSQL a failed statement would have aborted the transaction: these must still commit.
      await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), ['o-1', rocket]);
      await app.outbox.publish('order.placed', { text: rocket }, { headers: { 'x-title': rocket } });
      return errors;
    });
    for (const error of refused) {
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as Error).message).toMatch(/lone UTF-16 surrogate/);
    }
    expect(refused.map((e) => (e as OutboxValidationError).field)).toEqual(['payload', 'payload', 'payload', 'headers']);
    expect(await orderCount()).toBe(1);
    expect(await outboxRows(app)).toHaveLength(1);
    await app.worker.drain();
    expect(recorder.seen.map((m) => [m.payload, m.headers])).toEqual([[{ text: rocket }, { 'x-title': rocket }]]);
  });
});

