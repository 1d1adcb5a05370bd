import { Injectable } from '@nestjs/common';
import fc from 'fast-check';
import { OutboxHandler, OutboxNonRetryableError, OutboxOperations, type OutboxMessage } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Sink {
  healed = false;
  readonly calls = new Map<string, number>();

  @OutboxHandler('race')
  async handle(m: OutboxMessage) {
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
          app.sql(`UPDATE "${app.table}" SET "processed_at" = ${hourAgo(backend)} WHERE "id" IN (${ids.map(() => '?').join(', ')})`),
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
          app.sql(`SELECT "id", "status", "redrive_count" FROM "${app.table}" WHERE "id" IN (${ids.map(() => '?').join(', ')})`),
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
});
