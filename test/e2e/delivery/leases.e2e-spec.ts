import { OutboxEvents, type OutboxLifecycleEvent } from '../../../lib';
import { claimAsAnotherWorker } from '../../fixtures/another-claim';
import { backends, type BackendName } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { outboxRows } from '../../fixtures/test-app';
import { stall, workerApps, type WorkerApp } from '../../fixtures/worker-app';
import { drained } from '../../fixtures/drain-result';

/** A time long past, as each backend stores times. */
const PAST: Record<BackendName, string> = {
  postgres: "'2020-01-01T00:00:00Z'",
  mariadb: "'2020-01-01 00:00:00'",
  sqlite3: "'2020-01-01T00:00:00.000Z'",
  'better-sqlite3': "'2020-01-01T00:00:00.000Z'",
};

/**
 * Another worker claims the events while this process stalls, as a worker that found their leases
 * expired does, and dies at once: their leases are over before and after its claim, so the drain that
 * held them before can only find its own writes rejected, and the next claim takes them again.
 */
async function anotherClaimTakes({ app, store }: WorkerApp, ids: string[], maxAttempts: number) {
  const expire = () =>
    app.raw.query(
      `UPDATE "${app.table}" SET "available_at" = ${PAST[app.backend]} WHERE "id" IN (${ids.map(() => '?').join(', ')})`,
      ids,
    );
  await expire();
  expect(await claimAsAnotherWorker(store, ids, { batchSize: 10, leaseMs: 60_000, maxAttempts })).toEqual(
    [...ids].sort(),
  );
  await expire();
}

describe.each(backends())('leases on %s', (backend) => {
  const start = workerApps(backend);

  it('counts the attempt at claim: an abandoned claim is retried with attempt 2 after its lease', async () => {
    const { app, b, store, publish, row } = await start({ worker: { leaseMs: 1000 } });
    const { id } = await publish('plain');
    const abandoned = await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 3 });
    expect(abandoned.events.map((e) => [e.id, e.attempts])).toEqual([[id, 1]]);
    // Leased: nothing to claim until the lease expires by the database clock.
    expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
    await eventually(async () => (await app.worker.drain()).delivered === 1, 10_000, 'lease expiry');
    expect(b.calls.map((c) => c.message.attempt)).toEqual([2]);
    expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 2 });
  });

  it('dead-letters an event whose final attempt was abandoned (the worker died)', async () => {
    const { app, b, store, publish, row } = await start({ worker: { leaseMs: 1000 }, retry: { maxAttempts: 1 } });
    const { id } = await publish('plain');
    await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 1 });
    await eventually(async () => (await app.worker.drain()).deadLettered === 1, 10_000, 'lease expiry');
    expect(b.calls).toHaveLength(0);
    const stored = await row(id);
    expect(stored).toMatchObject({ status: 'dead', attempts: 1, claim_token: null });
    expect(stored.note).toMatch(/attempt 1 of 1 did not finish before its lease expired/);
    expect(app.logger.matching(/Dead-lettered outbox event/)).toHaveLength(1);
  });

  it('rejects a late acknowledgement, failure or release after the lease expired and changes nothing', async () => {
    const { store, publish, row } = await start();
    const { id } = await publish('plain');
    const first = await store.claim({ batchSize: 1, leaseMs: 1000, maxAttempts: 3 });
    const second = await eventually(
      async () => {
        const claim = await store.claim({ batchSize: 1, leaseMs: 60_000, maxAttempts: 3 });
        return claim.events.length ? claim : undefined;
      },
      10_000,
      'lease expiry',
    );
    expect(second.token).not.toBe(first.token);
    const before = await row(id);
    expect(before).toMatchObject({ status: 'pending', attempts: 2, claim_token: second.token });

    expect(await store.acknowledge([id], first.token)).toBe(0);
    expect(
      await store.fail(id, first.token, { error: 'late', completedHandlers: [], deadLetter: true, retryDelayMs: 0 }),
    ).toBe(false);
    expect(await store.release(id, first.token, true)).toBe(false);
    expect(await row(id)).toEqual(before);

    expect(await store.acknowledge([id], second.token)).toBe(1);
    expect((await row(id)).status).toBe('delivered');
    // Acknowledged means never claimable again.
    expect((await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 3 })).events).toHaveLength(0);
  });

  it('runs each event whose last attempt outlived its lease alone, after the rest of its batch', async () => {
    const { app, b, store, row } = await start({ worker: { concurrency: 10 } });
    const items = (n: number) => Array.from({ length: n }, (_, i) => ({ topic: 'traced', payload: { i } }));
    const cut = await app.txHost.withTransaction(() => app.outbox.publishMany(items(3)));
    // A worker claims them and dies: nothing is recorded, and their short leases run out.
    await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 3 });
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    const fresh = await app.txHost.withTransaction(() => app.outbox.publishMany(items(3)));

    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 6, failed: 0, deadLettered: 0 });
    // One claim takes all six: the fresh three run together, then one suspect alone; the other two go
    // back uncounted and come one per claim.
    expect(result.released).toBe(3);
    const overlapped = (id: string) => b.trace.indexOf(`end ${id}`) - b.trace.indexOf(`start ${id}`) > 1;
    expect(fresh.every((e) => overlapped(e.id))).toBe(true);
    expect(cut.some((e) => overlapped(e.id))).toBe(false);
    const firstSuspect = Math.min(...cut.map((e) => b.trace.indexOf(`start ${e.id}`)));
    expect(Math.max(...fresh.map((e) => b.trace.indexOf(`end ${e.id}`)))).toBeLessThan(firstSuspect);
    for (const { id } of cut) {
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 2 });
      expect((await row(id)).note).toMatch(/^attempt 1 of 3 did not finish before its lease expired/);
      expect(await row(id)).toMatchObject({ last_error: null, last_expired_attempt: 1 });
    }
    for (const { id } of fresh)
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, last_error: null });
    expect(
      app.logger.matching(/: attempt 1 did not finish before its lease expired; running attempt 2 alone$/),
    ).toHaveLength(3);
  });

  describe('a lease that ran out while the process stalled', () => {
    // RELIABILITY 33: a lease's expiry makes the event claimable; only another claim voids the outcome.
    it('still records the outcome when no other claim took the event: delivered once, attempt 1', async () => {
      const { app, b, publish, row } = await start({ worker: { leaseMs: 1000 } });
      b.stallMs = 1500;
      const { id } = await publish('stalls');
      expect(await app.worker.drain()).toEqual(drained({ delivered: 1 }));
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, expired_attempts: 0, note: null });
      expect(app.logger.matching(/rejected/)).toEqual([]);
    });

    /** The drain's result: the outcome of the first attempt rejected, the next claim's attempt delivered. */
    const DELIVERED_AFTER_A_LOST_LEASE = drained({ delivered: 1, lostLeases: 1 });

    /**
     * Publishes an event whose handler's first call sees another claim take it (and, with `thenThrow`,
     * then fails), and drains: later calls succeed.
     */
    async function drainTakenMeanwhile(thenThrow: boolean) {
      // One lane: the worker claims nothing more while the handler runs, so the other claim is the only
      // one to find the row due (a claim of the worker's own would lock it for a moment on MySQL).
      const worker = await start({
        worker: { leaseMs: 1000, concurrency: 1 },
        retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 },
      });
      const { b, publish, app } = worker;
      let calls = 0;
      b.sabotage = async (message) => {
        calls++;
        b.sabotageThenThrow = thenThrow && calls === 1;
        if (calls === 1) await anotherClaimTakes(worker, [message.id], 5);
      };
      const { id } = await publish('sabotage');
      return { ...worker, id, result: await app.worker.drain() };
    }

    it('counts a rejected acknowledgement as a lost lease when another claim took the event; the next claim delivers it', async () => {
      const { app, row, id, result } = await drainTakenMeanwhile(false);
      expect(result).toEqual(DELIVERED_AFTER_A_LOST_LEASE);
      expect(
        app.logger.matching(
          /^Outbox acknowledgement of 1 of 1 event\(s\) rejected: their lease expired and another claim took/,
        ),
      ).toHaveLength(1);
      expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 3 });
    });

    it('counts a rejected failure as a lost lease and records none of it', async () => {
      const { app, row, id, result } = await drainTakenMeanwhile(true);
      expect(result).toEqual(DELIVERED_AFTER_A_LOST_LEASE);
      expect(
        app.logger.matching(
          new RegExp(`^Outbox failure of event ${id} rejected: its lease expired and another claim took it`),
        ),
      ).toHaveLength(1);
      const stored = await row(id);
      expect(stored).toMatchObject({ status: 'delivered', attempts: 3 });
      // The rejected failure wrote nothing: no error, only the claims' notes of the expired attempts.
      expect(stored.last_error).toBeNull();
      expect(stored.note).toMatch(/did not finish before its lease expired/);
    });
  });

  it('delivers the rest of an acknowledgement batch another claim took one event of: each counted, reported and emitted', async () => {
    const worker = await start({
      worker: { leaseMs: 1000, concurrency: 2 },
      retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 },
    });
    const { app, b, store } = worker;
    // Both handlers wait while another claim takes the first one's event, then succeed together: their
    // successes go out in one acknowledgement, which the database refuses for that event only.
    const taken = deferred<string>();
    let calls = 0;
    b.sabotage = async (message) => {
      if (++calls === 1) {
        await anotherClaimTakes(worker, [message.id], 5);
        taken.resolve(message.id);
      }
      await taken.promise;
    };
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2].map((n) => ({ topic: 'sabotage', payload: { n } }))),
    );
    const seen: OutboxLifecycleEvent[] = [];
    const subscription = app.module
      .get(OutboxEvents)
      .events$.subscribe((e) => (e.type === 'delivered' || e.type === 'lease.lost') && seen.push(e));
    const acknowledge = jest.spyOn(store, 'acknowledge');
    let result;
    try {
      result = await app.worker.drain();
    } finally {
      subscription.unsubscribe();
    }
    const takenId = await taken.promise;
    const otherId = published.map((p) => p.id).find((id) => id !== takenId)!;
    expect([...acknowledge.mock.calls[0][0]].sort()).toEqual([takenId, otherId].sort());
    expect(result).toEqual(drained({ delivered: 2, lostLeases: 1 }));
    // The taken event's next claim may be written before the refused batch is reported: in any order.
    expect(seen).toHaveLength(3);
    expect(seen).toContainEqual(expect.objectContaining({ type: 'lease.lost', ids: [takenId], count: 1 }));
    expect(seen).toContainEqual(expect.objectContaining({ type: 'delivered', id: otherId, attempt: 1 }));
    expect(seen).toContainEqual(expect.objectContaining({ type: 'delivered', id: takenId, attempt: 3 }));
    expect(app.logger.matching(/^Outbox acknowledgement of 1 of 2 event\(s\) rejected/)).toHaveLength(1);
  });

  it('counts the suspects it could not give back as lost leases, when another claim took them while the process stalled', async () => {
    // Without renewal: with it, a renewal may find the third one's lease lost before its start is refused.
    const worker = await start({
      worker: { leaseMs: 1000, concurrency: 10, renewLease: false },
      retry: { maxAttempts: 10, initialDelayMs: 0, maxDelayMs: 0 },
    });
    const { app, store, row } = worker;
    const cut = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'plain', payload: { n } }))),
    );
    const cutIds = cut.map((e) => e.id);
    // A worker claims all three and dies; their leases run out, so all three are suspects next time.
    await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 10 });
    await eventually(async () => (await app.outbox.counts()).inFlight === 0, 10_000, 'lease expiry');
    // The process stalls right after the next claim, past that claim's lease, before it gives the two
    // suspects back, and meanwhile another worker claims all three (and dies too): the release is
    // rejected, and so is the start of the third (its lease is gone too).
    const releaseMany = store.releaseMany.bind(store);
    let stalled = false;
    // The worker would only log a failure of the other claim as a failed release: kept to be reported.
    let otherClaim: unknown;
    jest.spyOn(store, 'releaseMany').mockImplementation(async (ids, token, uncount) => {
      if (!stalled) {
        stalled = true;
        stall(1100);
        await anotherClaimTakes(worker, cutIds, 10).catch((error: unknown) => (otherClaim = error));
      }
      return releaseMany(ids, token, uncount);
    });
    const result = await app.worker.drain();
    expect(otherClaim).toBeUndefined();
    expect(result).toMatchObject({ delivered: 3, failed: 0, deadLettered: 0, lostLeases: 3 });
    expect(app.logger.matching(/^Outbox release of event .* rejected: its lease expired/)).toHaveLength(1);
    for (const { id } of cut) expect((await row(id)).status).toBe('delivered');
  });

  it('gives back, uncounted, an event whose lease has too little time left to start it', async () => {
    // Without renewal (see lease-renewal.e2e-spec.ts for the same claim with it).
    const { app } = await start({ worker: { leaseMs: 1000, concurrency: 1, batchSize: 3, renewLease: false } });
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2].map((n) => ({ topic: 'takes.450ms', payload: { n } }))),
    );
    const result = await app.worker.drain();
    // Each claim runs its first event, which takes 450 ms of the 1 s lease; the others cannot fit their
    // 500 ms timeout in what is left and go back: two from the first claim, one from the second.
    expect(result.released).toBe(3);
    expect(result.delivered).toBe(3);
    const rows = await outboxRows(app);
    expect(rows.map((r) => [r.status, r.attempts])).toEqual(published.map(() => ['delivered', 1]));
  });
});
