import { backends } from '../../fixtures/backends';
import type { TestApp } from '../../fixtures/test-app';
import { workerApps } from '../../fixtures/worker-app';
import { drained } from '../../fixtures/drain-result';

const dropOutbox = (app: TestApp) => app.raw.query(`DROP TABLE "${app.table}"`);

/** A drain's result when nothing could be recorded, and nothing is counted. */
const NOTHING_DONE = drained({});

describe.each(backends())('a database error while the worker records, on %s', (backend) => {
  const start = workerApps(backend);

  it('a claim: logged, and the drain ends with nothing done', async () => {
    const { app } = await start();
    await dropOutbox(app);
    expect(await app.worker.drain()).toEqual(NOTHING_DONE);
    expect(app.logger.matching(/^Outbox claim failed; will retry at the next poll: QueryFailedError: /)).toHaveLength(
      1,
    );
  });

  it('an acknowledgement: logged with the event, left to the lease', async () => {
    const { app, b, publish } = await start();
    b.sabotage = () => dropOutbox(app);
    const { id } = await publish('sabotage');
    expect(await app.worker.drain()).toEqual(NOTHING_DONE);
    expect(
      app.logger.matching(
        new RegExp(`^Outbox acknowledgement of event ${id} failed; its lease will expire: QueryFailedError: `),
      ),
    ).toHaveLength(1);
  });

  it('a failure: logged with the event, left to the lease', async () => {
    const { app, b, publish } = await start();
    b.sabotage = () => dropOutbox(app);
    b.sabotageThenThrow = true;
    const { id } = await publish('sabotage');
    // A database error is not a lost lease: nothing is counted, for a failure as for an acknowledgement.
    expect(await app.worker.drain()).toEqual(NOTHING_DONE);
    expect(
      app.logger.matching(
        new RegExp(`^Outbox failure of event ${id} failed; its lease will expire: QueryFailedError: `),
      ),
    ).toHaveLength(1);
  });

  it('a release: logged with the event, not counted', async () => {
    const { app, b } = await start({
      worker: { leaseMs: 1000, handlerTimeoutMs: 500, concurrency: 1, batchSize: 2, renewLease: false },
    });
    // The first handler drops the table and uses 450 ms of the 1 s lease: the second event cannot fit
    // its 500 ms timeout in what is left, and its release meets the missing table.
    b.sabotage = async () => {
      b.sabotage = () => Promise.resolve();
      await dropOutbox(app);
      await new Promise((resolve) => setTimeout(resolve, 450));
    };
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2].map((n) => ({ topic: 'sabotage', payload: { n } }))),
    );
    expect(await app.worker.drain()).toEqual(NOTHING_DONE);
    expect(app.logger.matching(/^Outbox release of event \S+ failed; its lease will expire: \w+Error: /)).toHaveLength(
      1,
    );
  });
});
