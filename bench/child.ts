/**
 * One worker process of the benchmark. Modes (argv[2]):
 *  lib-drain  <db> <table> <batch>   a Nest app with the outbox; on "go" drains, prints {"delivered":n}
 *  raw-drain  <db> <table> <batch>   the hand-written drain loop with the bare driver, same protocol
 *  lib-listen <db> <table>           a Nest app whose worker polls (default interval); prints "R <id> <ms>" per event
 *  lib-memory <db> <table>           drains like lib-drain, printing RSS before and after (run with --expose-gc)
 */
import { createInterface } from 'node:readline';
import { OutboxWorker } from '../lib';
import { libraryApp, Sink, type Db } from './env';
import { raw, rawDrain } from './raw';

const [mode, db, table, batchText] = process.argv.slice(2) as [string, Db, string, string];
const batch = Number(batchText ?? 500);
const out = (line: string) => process.stdout.write(`${line}\n`);
const gc = () => (global as { gc?: () => void }).gc?.();

function onGo(run: () => Promise<void>) {
  createInterface({ input: process.stdin }).once('line', () => {
    run().then(
      () => process.exit(0),
      (error) => {
        process.stderr.write(`${error?.stack ?? error}\n`);
        process.exit(1);
      },
    );
  });
}

async function main() {
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
  const app = await libraryApp(db, table, {
    worker: { enabled: listen, batchSize: batch, concurrency: 10 },
  }, 4);
  const sink = app.get(Sink);
  if (listen) {
    sink.onReceive = (m) => out(`R ${m.id} ${Date.now()}`);
    out('READY');
    createInterface({ input: process.stdin }).once('line', () => void app.close().then(() => process.exit(0)));
    return;
  }
  out('READY');
  onGo(async () => {
    gc();
    const before = process.memoryUsage();
    await app.get(OutboxWorker).drain();
    gc();
    const after = process.memoryUsage();
    out(
      JSON.stringify({
        delivered: sink.count,
        rssBefore: before.rss,
        rssAfter: after.rss,
        heapBefore: before.heapUsed,
        heapAfter: after.heapUsed,
      }),
    );
    await app.close();
  });
}

main().catch((error) => {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
});
