/**
 * Per-key order's figures (issue 26), in the same run as the unordered ones: the drain of events of
 * many keys and of one hot key, and the enqueue of ordered events, each against its unordered twin.
 */
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { OutboxService } from '../lib';
import { libraryApp, type Db } from './env';

/** The ordering option of every ordered bench app and worker. */
export const BENCH_ORDERING = { ordering: [{ topic: 'bench.event' }] };

/** The same, acknowledged by run (`acknowledge: 'run'`: the `_run` cases). */
export const BENCH_ORDERING_BY_RUN = { ordering: [{ topic: 'bench.event', acknowledge: 'run' as const }] };

/** What a bench child reads to order the bench topic: by event (`1`) or by run (`run`). */
export function orderingOf(env: string | undefined) {
  if (env === 'run') return BENCH_ORDERING_BY_RUN;
  return env === '1' ? BENCH_ORDERING : {};
}

/**
 * Publishes `count` events of the bench topic through the library, `perTransaction` per transaction,
 * event n keyed `k<n mod keys>` (with no key without `keys`).
 */
export async function fillOrdered(
  db: Db,
  table: string,
  count: number,
  keys: number | undefined,
  perTransaction = 1000,
): Promise<void> {
  const app = await libraryApp(db, table, { worker: { enabled: false }, ...BENCH_ORDERING }, 2);
  const tx = app.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
  const outbox = app.get(OutboxService);
  for (let done = 0; done < count; done += perTransaction) {
    const items = Array.from({ length: Math.min(perTransaction, count - done) }, (_, i) => ({
      topic: 'bench.event',
      payload: { n: 1 },
      key: keys === undefined ? undefined : `k${(done + i) % keys}`,
    }));
    await tx.withTransaction(() => outbox.publishMany(items));
  }
  await app.close();
}

export interface OrderedResult {
  /** Events per second: `<case>` ordered, `<case>_unordered` the library's unordered drain of the same case. */
  drain: Record<string, number>;
  /**
   * Transactions/s: a business insert alone (`libBusiness`), with an event, with an ordered event; the ratios to the
   * business insert alone, the library's and (`raw…`) raw SQL's doing the same statements with the bare driver.
   */
  enqueue?: {
    libBusiness: number;
    libOutbox: number;
    libOrdered: number;
    ratio: number;
    orderedRatio: number;
    rawRatio?: number;
    rawOrderedRatio?: number;
  };
  /**
   * PostgreSQL: one worker × 500 on one key acknowledged by event, against raw SQL doing the same durable step per
   * event in a loop, sent as one script (`rawScript`) and a statement per round trip (`rawStatements`); events/s.
   */
  strictStep?: { events: number; library: number; rawScript: number; rawStatements: number };
}

/** Issue 41: what ordering takes off the library's enqueue ratio, at most this much more than it takes off raw SQL's. */
export const ORDERED_ENQUEUE_MARGIN = 0.05;

/** Issue 41: the library's hot key acknowledged by event, over raw SQL doing the same step in one round trip. */
export const STRICT_STEP_TARGET = 0.5;

/**
 * The targets of issues 26 and 41: ordered over unordered drain, per database and case; `_run`: one hot
 * key acknowledged by run, against the unordered drain of as many workers. A target of 0 is reported
 * only: a hot key acknowledged by event (issue 41 measures it against raw SQL doing its per-event step).
 */
export const ORDERED_TARGETS: Record<Db, Record<string, number>> = {
  postgres: { '4w_b500_1000keys': 0.5, '4w_b500_1key': 0, '1w_b500_1key_run': 0.25 },
  mariadb: { '4w_b500_1000keys': 0.4, '1w_b500_1key_run': 0.15 },
  sqlite: { '1w_b500_1000keys': 0.5, '1w_b500_1key_run': 0.25 },
};

export function orderedReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '—';
  const lines = [
    '',
    'Per-key order (`ordering`): the same drain with every event on one of 1,000 keys (or all on one key), and the',
    'enqueue of an event keyed with one of 100 keys, against the unordered library in the same run.',
    '',
    '| database | measure | unordered | ordered | ordered / unordered | target |',
    '| --- | --- | ---: | ---: | ---: | --- |',
  ];
  for (const db of dbs) {
    const o = (results[db] as { ordered?: OrderedResult } | undefined)?.ordered;
    if (!o) continue;
    for (const [name, target] of Object.entries(ORDERED_TARGETS[db])) {
      const ordered = o.drain[name];
      const unordered = o.drain[`${name}_unordered`];
      if (ordered === undefined) continue;
      const ratio = ordered / unordered;
      lines.push(
        `| ${db} | drain ${name.replace(/_run$/, ', acknowledged by run').replace(/_/g, ', ')} (events/s) | ${f(unordered)} | ${f(ordered)} | ${f(ratio, 2)} | ${target > 0 ? `≥ ${target}: ${ratio >= target ? 'PASS' : 'FAIL'}` : 'reported'} |`,
      );
    }
    const step = o.strictStep;
    if (step) {
      const ratio = step.library / step.rawScript;
      lines.push(
        `| ${db} | drain 1w, b500, 1 key, acknowledged by event, against raw SQL doing its step per event in one round trip; ` +
          `${f(step.events)} events (events/s) | raw ${f(step.rawScript)} (a round trip per statement: ${f(step.rawStatements)}) | ` +
          `${f(step.library)} | ${f(ratio, 2)} (to the raw per statement: ${f(step.library / step.rawStatements, 2)}) | ` +
          `≥ ${STRICT_STEP_TARGET}: ${ratio >= STRICT_STEP_TARGET ? 'PASS' : 'FAIL'} |`,
      );
    }
    const e = o.enqueue;
    if (e) {
      // Issue 26 asked for the ordered ratio within 0.10 of the unordered one; raw SQL's own upsert takes 0.11–0.16
      // off it here, so issue 41 judges it against raw SQL, on the next row, where that is measured.
      const judged = e.rawRatio !== undefined ? 'reported (judged on the next row)' : undefined;
      const ok = e.orderedRatio >= e.ratio - 0.1;
      lines.push(
        `| ${db} | enqueue with an event (tx/s; ratio to business only) | ${f(e.libOutbox)} (${f(e.ratio, 2)}) | ${f(e.libOrdered)} (${f(e.orderedRatio, 2)}) | ${f(e.libOrdered / e.libOutbox, 2)} | ${judged ?? `ratio within 0.10: ${ok ? 'PASS' : 'FAIL'}`} |`,
      );
      if (e.rawRatio !== undefined && e.rawOrderedRatio !== undefined) {
        // Issue 41: what ordering costs the library's enqueue, within 0.05 of what it costs raw SQL.
        const libDrop = e.ratio - e.orderedRatio;
        const rawDrop = e.rawRatio - e.rawOrderedRatio;
        lines.push(
          `| ${db} | enqueue, ratio to business only lost to ordering: library against raw SQL doing the same statements | raw ${f(e.rawRatio, 2)} → ${f(e.rawOrderedRatio, 2)} (${f(rawDrop, 2)}) | library ${f(e.ratio, 2)} → ${f(e.orderedRatio, 2)} (${f(libDrop, 2)}) | ${f(libDrop - rawDrop, 2)} | within ${ORDERED_ENQUEUE_MARGIN}: ${libDrop - rawDrop <= ORDERED_ENQUEUE_MARGIN ? 'PASS' : 'FAIL'} |`,
        );
      }
    }
  }
  return `${lines.join('\n')}\n`;
}
