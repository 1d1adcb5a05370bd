import { Injectable } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../../lib';
import { describeEachServer, sqliteBackends } from '../../fixtures/backends';
import { deferred } from '../../fixtures/eventually';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Seen {
  names: string[] = [];
  @OutboxHandler('ordered')
  handle(m: OutboxMessage<{ name: string }>) {
    this.names.push(m.payload.name);
  }
}

/**
 * Ids become visible in commit order, not in the order they were taken: an event published first but
 * committed last must still be delivered (no "last id seen" cursor), and a rolled-back one never.
 */
describeEachServer('commit order on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('delivers T1, published first and committed last, after T2 and a poll in between; never the rolled-back T3', async () => {
    app = await createTestApp({ backend, providers: [Seen] });
    const seen = app.module.get(Seen);
    const publish = (name: string) => app.outbox.publish('ordered', { name });

    const t1Published = deferred();
    const t1Commit = deferred();
    const t1 = app.txHost.withTransaction(async () => {
      await publish('T1');
      t1Published.resolve();
      await t1Commit.promise;
    });
    await t1Published.promise;
    await app.txHost.withTransaction(() => publish('T2'));
    await expect(
      app.txHost.withTransaction(async () => {
        await publish('T3');
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');

    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(seen.names).toEqual(['T2']);

    t1Commit.resolve();
    await t1;
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(seen.names).toEqual(['T2', 'T1']);
    expect(await app.outbox.counts()).toEqual({ pending: 0, due: 0, scheduled: 0, inFlight: 0, delivered: 2, dead: 0 });
  });
});

/** SQLite has one writer at a time: the worker's poll waits for the open transaction instead. */
describe.each(sqliteBackends())('commit order on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('does not deliver an event of a transaction still open during the poll, and delivers it after commit; never a rolled-back one', async () => {
    app = await createTestApp({ backend, providers: [Seen] });
    const seen = app.module.get(Seen);
    const publish = (name: string) => app.outbox.publish('ordered', { name });

    await expect(
      app.txHost.withTransaction(async () => {
        await publish('T0');
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');

    const t1Published = deferred();
    const t1Commit = deferred();
    const t1 = app.txHost.withTransaction(async () => {
      await publish('T1');
      t1Published.resolve();
      await t1Commit.promise;
    });
    await t1Published.promise;
    let drained = false;
    const drain = app.worker.drain().then((result) => ((drained = true), result));
    // Real round trips on another connection while T1 is open: the poll must not have delivered.
    for (let i = 0; i < 3; i++) await app.raw.query('SELECT 1');
    expect(seen.names).toEqual([]);
    expect(drained).toBe(false);

    t1Commit.resolve();
    await t1;
    expect(await drain).toMatchObject({ delivered: 1 });
    expect(seen.names).toEqual(['T1']);
    expect((await app.outbox.counts()).delivered).toBe(1);
  });
});
