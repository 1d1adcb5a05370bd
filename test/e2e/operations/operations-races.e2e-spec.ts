import { Injectable } from '@nestjs/common';
import fc from 'fast-check';
import {
  OutboxHandler,
  OutboxNonRetryableError,
  OutboxOperations,
  type OutboxMessage,
  type OutboxOperationResult,
} from '../../../lib';
import { backends, isSqlite, rawDb, type BackendName } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Sink {
  healed = false;
  readonly calls = new Map<string, number>();

  @OutboxHandler('race')
  handle(m: OutboxMessage) {
    if (!this.healed) throw new OutboxNonRetryableError('not yet');
    this.calls.set(m.id, (this.calls.get(m.id) ?? 0) + 1);
  }
}

function hourAgo(backend: BackendName): string {
  if (backend === 'postgres') return `now() - interval '1 hour'`;
  if (backend === 'mariadb') return 'UTC_TIMESTAMP(6) - INTERVAL 1 HOUR';
  return `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hours')`;
}

const EVENTS = 12;
const HOUR_MS = 3_600_000;

/**
 * Two results of one operation on overlapping selections, against the events it applies to: each event
 * changed by exactly one call, every selected event a call did not change reported by it as skipped
 * with the state it found (`reason`), and a call's `matched` the events it changed.
 */
function expectEachChangedOnce(
  calls: Array<{ selected: string[]; result: OutboxOperationResult }>,
  applicable: string[],
  reason: string,
): void {
  for (const { selected, result } of calls) {
    expect(result.matched).toBe(result.changed);
    const skipped = result.skipped.map((s) => s.id);
    expect(new Set(skipped).size).toBe(skipped.length);
    expect(skipped.every((id) => selected.includes(id))).toBe(true);
    expect(skipped.length).toBe(selected.length - result.changed);
    expect(result.skipped.every((s) => s.reason === reason)).toBe(true);
  }
  expect(calls.reduce((sum, { result }) => sum + result.changed, 0)).toBe(applicable.length);
  // Changed by one call, skipped by every other that selected it.
  for (const id of applicable) {
    const skippedBy = calls.filter(({ result }) => result.skipped.some((s) => s.id === id)).length;
    expect(skippedBy).toBe(calls.filter(({ selected }) => selected.includes(id)).length - 1);
  }
}

/**
 * Locking reads of the table under way on other connections: on PostgreSQL, those waiting for a row lock.
 * MariaDB reports lock waits only through INNODB_TRX, a cache it refreshes only when nobody read it for
 * 0.1 s (never, polled this often): there, those running.
 */
async function lockingReads(app: TestApp): Promise<number> {
  if (app.backend === 'postgres') {
    const rows = await app.raw.query<{ n: string }>(
      `SELECT count(*) AS "n" FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
      [`%"${app.table}"%FOR UPDATE`],
    );
    return Number(rows[0].n);
  }
  const rows = await app.raw.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE ?`,
    [`%\`${app.table}\`%FOR UPDATE`],
  );
  return Number(rows[0].n);
}

type Command =
  | { kind: 'redrive'; pick: boolean[]; ticks: number }
  | { kind: 'discard'; pick: boolean[]; ticks: number }
  | { kind: 'drain'; ticks: number }
  | { kind: 'purge'; ticks: number };

const pick = fc.array(fc.boolean(), { minLength: EVENTS, maxLength: EVENTS });
const ticks = fc.integer({ min: 0, max: 6 });
const command: fc.Arbitrary<Command> = fc.oneof(
  fc.record({ kind: fc.constant('redrive' as const), pick, ticks }),
  fc.record({ kind: fc.constant('discard' as const), pick, ticks }),
  fc.record({ kind: fc.constant('drain' as const), ticks }),
  fc.record({ kind: fc.constant('purge' as const), ticks }),
);

const yieldTicks = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
};

/**
 * Redrives, discards, claims and retention passes on the same dead letters at once, over real
 * connections, in interleavings fast-check varies: every change is a compare-and-set on the state, so
 * an event is never delivered twice, never deleted once redriven, and never resurrected once delivered.
 */
describe.each(backends())('operations racing claims and retention on %s', (backend) => {
  let app: TestApp;
  let ops: OutboxOperations;
  let sink: Sink;

  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [Sink],
      outbox: { retention: { deadMs: 1000 }, worker: { batchSize: 5 } },
    });
    ops = app.module.get(OutboxOperations);
    sink = app.module.get(Sink);
  });
  afterAll(() => app.dispose());

  it('loses nothing and doubles nothing, whatever the interleaving', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 2, maxLength: 6 }), async (commands) => {
        sink.healed = false;
        const published = await app.txHost.withTransaction(() =>
          app.outbox.publishMany(Array.from({ length: EVENTS }, (_, n) => ({ topic: 'race', payload: { n } }))),
        );
        const ids = published.map((p) => p.id);
        await app.worker.drain();
        // Dead an hour ago, so retention (deadMs: 1 s) may delete any of them.
        await app.raw.query(
          app.sql(
            `UPDATE "${app.table}" SET "processed_at" = ${hourAgo(backend)} WHERE "id" IN (${ids.map(() => '?').join(', ')})`,
          ),
          ids,
        );
        sink.healed = true;

        let redriven = 0;
        let discarded = 0;
        await Promise.all(
          commands.map(async (c) => {
            await yieldTicks(c.ticks);
            const chosen = 'pick' in c ? ids.filter((_, i) => c.pick[i]) : [];
            // Awaited before adding: `total += await …` would read the total before the wait.
            if (c.kind === 'redrive' && chosen.length) {
              const { changed } = await ops.redrive({ ids: chosen });
              redriven += changed;
            }
            if (c.kind === 'discard' && chosen.length) {
              const { changed } = await ops.discard({ ids: chosen });
              discarded += changed;
            }
            if (c.kind === 'drain') await app.worker.drain();
            if (c.kind === 'purge') await app.worker.purge();
          }),
        );
        await app.worker.drain();

        const rows = await app.raw.query<{ id: string; status: string; redrive_count: number }>(
          app.sql(
            `SELECT "id", "status", "redrive_count" FROM "${app.table}" WHERE "id" IN (${ids.map(() => '?').join(', ')})`,
          ),
          ids,
        );
        const byId = new Map(rows.map((r) => [String(r.id), r]));
        for (const id of ids) {
          const found = byId.get(id);
          const calls = sink.calls.get(id) ?? 0;
          if (!found) {
            expect(calls).toBe(0);
            continue;
          }
          // Redriven at most once (it never dies again), and then delivered exactly once.
          expect([found.status, Number(found.redrive_count), calls]).toEqual(
            Number(found.redrive_count) > 0 ? ['delivered', 1, 1] : ['dead', 0, 0],
          );
        }
        expect(redriven).toBe(rows.filter((r) => Number(r.redrive_count) > 0).length);
        expect(discarded).toBeLessThanOrEqual(EVENTS - rows.length);
      }),
      { numRuns: 8 },
    );
  });

  const scheduled = async (count: number) => {
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(
        Array.from({ length: count }, (_, n) => ({ topic: 'race', payload: { n }, delayMs: HOUR_MS })),
      ),
    );
    return published.map((p) => p.id);
  };

  /**
   * Another transaction holding the rows of `ids` locked until `release()`, so that calls started meanwhile
   * are under way (begun, their clock read) when they get them. None on SQLite: it has no row locks, its
   * one writer at a time runs the calls one after the other.
   */
  const holdRows = async (ids: string[]) => {
    if (isSqlite(backend)) return undefined;
    const holder = await rawDb(backend);
    await holder.query('BEGIN');
    await holder.query(
      app.sql(`SELECT "id" FROM "${app.table}" WHERE "id" IN (${ids.map(() => '?').join(', ')}) FOR UPDATE`),
      ids,
    );
    return {
      /** Resolves once `calls` locking reads of the table wait for them. */
      waitedOnBy: (calls: number) =>
        eventually(async () => (await lockingReads(app)) === calls, 20_000, `${calls} locking read(s)`),
      release: () => holder.query('COMMIT'),
      close: () => holder.close(),
    };
  };

  const expectAllDue = async (ids: string[]) => {
    const { items } = await ops.find({ id: ids }, { limit: 500 });
    expect(items.map((i) => [i.id, i.state]).sort()).toEqual(ids.map((id) => [id, 'due']).sort());
  };

  it('two deliverNow calls of the same scheduled events at once: each made due by one call, skipped as due by the other', async () => {
    const ids = await scheduled(50);
    const held = await holdRows(ids);
    try {
      const calls = [ops.deliverNow({ ids }), ops.deliverNow({ ids })];
      // Awaited below: handled now, so that one failing early is no unhandled rejection.
      for (const call of calls) call.catch(() => undefined);
      await held?.waitedOnBy(2);
      await held?.release();
      const results = await Promise.all(calls);
      expectEachChangedOnce(
        results.map((result) => ({ selected: ids, result })),
        ids,
        'due',
      );
    } finally {
      await held?.close();
    }
    await expectAllDue(ids);
  });

  // Arranged with a row lock: SQLite has none (its calls run one after the other, the test above).
  (isSqlite(backend) ? describe.skip : describe)('with row locks', () => {
    it('deliverNow that began first and waited for the rows another deliverNow changed: skips them as due', async () => {
      // The first event is the first row the first call locks (ids grow): held, it keeps that call, begun
      // and its clock read, waiting before it locks any other row, while the second call runs.
      const [first, ...shared] = await scheduled(51);
      const held = (await holdRows([first]))!;
      try {
        const firstSelected = [first, ...shared];
        const firstCall = ops.deliverNow({ ids: firstSelected });
        firstCall.catch(() => undefined);
        await held.waitedOnBy(1);
        const second = await ops.deliverNow({ ids: shared });
        await held.release();
        const firstResult = await firstCall;
        expect(second).toEqual({ dryRun: false, matched: 50, changed: 50, skipped: [] });
        expect(firstResult).toMatchObject({ matched: 1, changed: 1 });
        expectEachChangedOnce(
          [
            { selected: firstSelected, result: firstResult },
            { selected: shared, result: second },
          ],
          firstSelected,
          'due',
        );
      } finally {
        await held.close();
      }
      await expectAllDue([first, ...shared]);
    });
  });
});
