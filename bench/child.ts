/**
 * One worker process of the benchmark. Modes (argv[2]):
 *  lib-drain  <db> <table> <batch>   a Nest app with the outbox; on "go" drains, prints {"delivered":n}
 *  raw-drain  <db> <table> <batch>   the hand-written drain loop with the bare driver, same protocol
 *  relay-drain <db> <table> <batch>  the minimal relay (relay.ts) on its own table, same protocol
 *  lease-relay-drain postgres <table> <batch>  the leased relay (lease-relay.ts) on its own table, one pg client, same protocol
 *  lib-listen <db> <table> <batch> [redis] a Nest app whose worker polls (default interval) and is woken by the database's
 *                                    channel, or by Redis; prints "R <id> <ms>" per event, "S" when a slow handler starts
 *  lib-run <db> <table> <batch>      a Nest app whose worker runs as in production (polls every 100 ms, woken by the
 *                                    database's channel where it has one); prints "C <count> <ms of the last>" as it
 *                                    delivers, at most every 20 ms; stops on "go"
 *  lib-memory <db> <table> <batch> <total>  drains like lib-drain, printing RSS before, at each quarter, and after (run with --expose-gc)
 *  raw-memory <db> <table> <batch> <total>  the same with the hand-written drain loop: the baseline of what Node and the driver take
 *  lib-bounds <db> <table> <variant> <url>  the worker of bounds.ts's run, its webhook posting to <url>; prints
 *                                    "F <id> <target> <ms>" per fast handler call, and "M <most slow calls at once>
 *                                    <slow calls>" when told to stop
 * With OUTBOX_BENCH_ORDERED=1 the library's modes order the bench topic per key (bench/ordered.ts); with
 * OUTBOX_BENCH_ORDERED=run, acknowledged by run.
 */
import { createInterface } from 'node:readline';
import { OutboxWorker } from '../lib';
import { libraryApp, Sink, wakeUpOption, type Db } from './env';
import { raw, rawDrain } from './raw';
import { relayDrain } from './relay';
import { leaseRelayClient, leaseRelayDrain } from './lease-relay';
import { orderingOf } from './ordered';
import { boundsApp, BoundsProbe, type BoundsVariant } from './bounds';
import { handlerSpan, likeAnApplication, observabilityOptions, type ObservabilityVariant } from './observability';

const [mode, db, table, batchText] = process.argv.slice(2) as [string, Db, string, string];
const batch = Number(batchText ?? 500);
const out = (line: string) => process.stdout.write(`${line}\n`);
const gc = () => (global as { gc?: () => void }).gc?.();
/** An error's stack, or whatever else was thrown. */
const stackOf = (error: unknown) => (error instanceof Error && error.stack ? error.stack : String(error));

function onGo(run: () => Promise<void>) {
  createInterface({ input: process.stdin }).once('line', () => {
    run().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`${stackOf(error)}\n`);
        process.exit(1);
      },
    );
  });
}

/** RSS after a full GC at each quarter of `total` deliveries: a plateau is a working set, a slope a leak. */
function memoryProbe(total: number) {
  gc();
  const before = process.memoryUsage();
  const cpu = process.cpuUsage();
  const quarters: number[] = [];
  return {
    delivered(count: number) {
      if (count % Math.ceil(total / 4) === 0 && quarters.length < 4) quarters.push(process.memoryUsage().rss);
    },
    report(delivered: number) {
      // The worker process's CPU, user and system, from go to the last delivery (before the GC below).
      const used = process.cpuUsage(cpu);
      gc();
      const after = process.memoryUsage();
      return {
        delivered,
        cpuUs: used.user + used.system,
        rssBefore: before.rss,
        rssQuarters: quarters,
        rssAfter: after.rss,
        heapBefore: before.heapUsed,
        heapAfter: after.heapUsed,
        heapTotalAfter: after.heapTotal,
      };
    },
  };
}

async function main() {
  if (mode === 'lib-bounds') {
    const [variant, url] = process.argv.slice(5) as [BoundsVariant, string];
    const { providers, options } = boundsApp(variant, url);
    const app = await libraryApp(db, table, options, 4, providers);
    const probe = app.get(BoundsProbe);
    probe.onFast = (id, target) => out(`F ${id} ${target} ${Date.now()}`);
    out('READY');
    createInterface({ input: process.stdin }).once('line', () => {
      out(`M ${probe.maxRunning} ${probe.calls}`);
      void app.close().then(() => process.exit(0));
    });
    return;
  }
  if (mode === 'raw-memory') {
    const r = await raw(db, 4);
    out('READY');
    onGo(async () => {
      const probe = memoryProbe(Number(process.argv[6]));
      const delivered = await rawDrain(db, r, table, batch, (count) => probe.delivered(count));
      out(JSON.stringify(probe.report(delivered)));
      await r.close();
    });
    return;
  }
  if (mode === 'relay-drain') {
    const r = await raw(db, 1);
    let handled = 0;
    out('READY');
    onGo(async () => {
      const delivered = await relayDrain(db, r, table, batch, () => void handled++);
      out(JSON.stringify({ delivered, handled }));
      await r.close();
    });
    return;
  }
  if (mode === 'lease-relay-drain') {
    const client = await leaseRelayClient();
    let handled = 0;
    // The no-op async handler: a promise per event, as an application's async handler returns one.
    const handler = () => {
      handled++;
      return Promise.resolve();
    };
    out('READY');
    onGo(async () => {
      const cpu = process.cpuUsage();
      const delivered = await leaseRelayDrain(client, table, batch, handler);
      const used = process.cpuUsage(cpu);
      out(JSON.stringify({ delivered, handled, cpuUs: used.user + used.system }));
      await client.end();
    });
    return;
  }
  if (mode === 'raw-drain') {
    const r = await raw(db, 1);
    out('READY');
    onGo(async () => {
      const delivered = await rawDrain(db, r, table, batch);
      out(JSON.stringify({ delivered }));
      await r.close();
    });
    return;
  }
  const listen = mode === 'lib-listen';
  const running = mode === 'lib-run';
  const app = await libraryApp(
    db,
    table,
    {
      worker: {
        enabled: listen || running,
        batchSize: batch,
        concurrency: 10,
        ...(running ? { pollIntervalMs: 100 } : {}),
      },
      ...wakeUpOption(listen ? process.argv[6] : undefined),
      ...orderingOf(process.env.OUTBOX_BENCH_ORDERED),
      ...observabilityOptions(process.env.OUTBOX_BENCH_OBSERVABILITY as ObservabilityVariant | undefined),
    },
    4,
  );
  const sink = app.get(Sink);
  if (running) {
    let last = 0;
    let reported = 0;
    sink.onReceive = () => (last = Date.now());
    const report = setInterval(() => {
      if (sink.count !== reported) out(`C ${(reported = sink.count)} ${last}`);
    }, 20);
    out('READY');
    createInterface({ input: process.stdin }).once('line', () => {
      clearInterval(report);
      void app.close().then(() => process.exit(0));
    });
    return;
  }
  if (listen) {
    sink.onReceive = (m) => out(`R ${m.id} ${Date.now()}`);
    sink.onSlow = () => out('S');
    out('READY');
    createInterface({ input: process.stdin }).once('line', () => void app.close().then(() => process.exit(0)));
    return;
  }
  const variant = process.env.OUTBOX_BENCH_OBSERVABILITY as ObservabilityVariant | undefined;
  if (variant) await likeAnApplication(app);
  out('READY');
  onGo(async () => {
    const probe = memoryProbe(Number(process.argv[6]));
    const span = handlerSpan(variant);
    sink.onReceive = span
      ? () => {
          span();
          probe.delivered(sink.count);
        }
      : () => probe.delivered(sink.count);
    await app.get(OutboxWorker).drain();
    out(JSON.stringify(probe.report(sink.count)));
    await app.close();
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${stackOf(error)}\n`);
  process.exit(1);
});
