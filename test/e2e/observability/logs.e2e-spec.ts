import { Writable } from 'node:stream';
import { ConsoleLogger, Injectable, Logger, type LoggerService } from '@nestjs/common';
import { Logger as PinoNestLogger, LoggerModule } from 'nestjs-pino';
import { currentOutboxMessage, OutboxHandler, type OutboxMessageContext } from '../../../lib';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Handlers {
  @OutboxHandler('l.fails')
  fails() {
    throw new Error('the card service refused: password=hunter2');
  }
}

/** A handler that logs through Nest's Logger, as an application's code does, after an await. */
@Injectable()
class ShippingHandlers {
  private readonly logger = new Logger('Shipping');
  readonly seen: Array<OutboxMessageContext | undefined> = [];

  @OutboxHandler('l.ships')
  async ship() {
    await new Promise((resolve) => setImmediate(resolve));
    this.seen.push(currentOutboxMessage());
    this.logger.log('shipping the order');
  }
}

/** A stream of JSON lines, parsed as they come. */
function jsonLines() {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as never);
      done();
    },
  });
  return { lines, stream };
}

/** A text stream's lines, for ConsoleLogger (which writes to process.stdout / stderr). */
function capturedOutput(): { text: () => string; restore: () => void } {
  let text = '';
  const writes = [process.stdout, process.stderr].map((stream) => {
    const original = stream.write.bind(stream);
    stream.write = (chunk: string | Uint8Array) => {
      text += chunk.toString();
      return true;
    };
    return () => (stream.write = original);
  });
  return { text: () => text, restore: () => writes.forEach((restore) => restore()) };
}

/** Publishes an event whose handler fails, and drains twice: a retry scheduled, then a dead letter. */
async function failTwice(app: TestApp): Promise<string> {
  const { id } = await app.txHost.withTransaction(() => app.outbox.publish('l.fails', { n: 1 }));
  await app.worker.drain();
  await app.worker.drain();
  return id;
}

const outbox = { retry: { maxAttempts: 2, initialDelayMs: 0, maxDelayMs: 0 } };

/**
 * nestjs-pino keeps the first LoggerModule's pino for the process, so every test of the file logs through one:
 * one stream, and the mixin an application sets to put the running handler's event on its own lines.
 */
const pino = jsonLines();
const pinoLogging = () =>
  LoggerModule.forRoot({ pinoHttp: [{ level: 'info', mixin: () => currentOutboxMessage() ?? {} }, pino.stream] });

/**
 * Log lines about an event carry its id and topic as fields, through Nest's `Logger`: what a JSON
 * logger receives (nestjs-pino, Nest's ConsoleLogger in JSON mode), and the same plain text as before
 * for Nest's default console.
 */
describe('log lines about events', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.dispose();
    app = undefined;
  });

  it('nestjs-pino gets the event id and topic as fields of the JSON line, the text as msg, redacted', async () => {
    const { lines } = pino;
    app = await createTestApp({ backend: 'better-sqlite3', providers: [Handlers], imports: [pinoLogging()], outbox });
    app.module.useLogger(app.module.get(PinoNestLogger));
    const id = await failTwice(app);

    const about = lines.filter((line) => line.eventId === id);
    expect(about.map((line) => [line.level, line.topic, line.context])).toEqual([
      [40, 'l.fails', 'OutboxWorker'],
      [50, 'l.fails', 'OutboxWorker'],
    ]);
    expect(about[0].msg).toBe(
      `Outbox event ${id} (l.fails) attempt 1 of 2 failed; retrying in 0 ms or later: ` +
        'Handlers.fails: Error: the card service refused: password=[redacted]',
    );
    expect(about[1].msg).toMatch(new RegExp(`^Dead-lettered outbox event ${id} \\(l\\.fails\\) after attempt 2: `));
    // One text per line: `msg`, not a `message` copy of it.
    expect(about.every((line) => !('message' in line))).toBe(true);
    // An event without a key: no key field.
    expect(about.every((line) => !('key' in line))).toBe(true);
    expect(JSON.stringify(lines)).not.toContain('hunter2');
  });

  it("while a handler runs, its event is the current message: a pino mixin puts it on the app's own lines", async () => {
    const { lines } = pino;
    app = await createTestApp({ backend: 'better-sqlite3', providers: [ShippingHandlers], imports: [pinoLogging()] });
    app.module.useLogger(app.module.get(PinoNestLogger));
    const { id } = await app.txHost.withTransaction(() => app!.outbox.publish('l.ships', { n: 1 }, { key: 'order-9' }));
    const { id: unkeyed } = await app.txHost.withTransaction(() => app!.outbox.publish('l.ships', { n: 2 }));
    expect(await app.worker.drain()).toMatchObject({ delivered: 2 });

    const current = { eventId: id, topic: 'l.ships', key: 'order-9', attempt: 1 };
    expect(app.module.get(ShippingHandlers).seen).toEqual(
      expect.arrayContaining([current, { eventId: unkeyed, topic: 'l.ships', key: null, attempt: 1 }]),
    );
    const shipping = lines.filter((line) => line.msg === 'shipping the order');
    expect(shipping.map((line) => line.eventId).sort()).toEqual([id, unkeyed].sort());
    expect(shipping.find((line) => line.eventId === id)).toMatchObject({ ...current, context: 'Shipping' });
    // Outside a handler's run there is none.
    expect(currentOutboxMessage()).toBeUndefined();
    expect(lines.filter((line) => line.msg !== 'shipping the order' && 'attempt' in line)).toEqual([]);
  });

  it("every line about a keyed event carries its key as a field: the retry, the dead letter, its key's block", async () => {
    const { lines } = pino;
    app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [Handlers],
      imports: [pinoLogging()],
      outbox: { ...outbox, ordering: [{ topic: 'l.*' }] },
    });
    app.module.useLogger(app.module.get(PinoNestLogger));
    const { id } = await app.txHost.withTransaction(() => app!.outbox.publish('l.fails', { n: 1 }, { key: 'order-7' }));
    await app.worker.drain();
    await app.worker.drain();

    const about = lines.filter((line) => line.eventId === id);
    expect(about.map((line) => [line.level, line.key])).toEqual([
      [40, 'order-7'],
      [50, 'order-7'],
      [40, 'order-7'],
    ]);
    expect(about[2].msg).toMatch(/^Outbox key "order-7" blocked behind its dead head/);
  });

  it("Nest's ConsoleLogger: the same text as ever in plain mode, the fields under message in JSON mode", async () => {
    for (const json of [false, true]) {
      const output = capturedOutput();
      let id: string;
      try {
        app = await createTestApp({ backend: 'better-sqlite3', providers: [Handlers], outbox });
        const logger: LoggerService = new ConsoleLogger({ json, colors: false });
        app.module.useLogger(logger);
        id = await failTwice(app);
      } finally {
        output.restore();
      }
      await app.dispose();
      app = undefined;
      const mine = output
        .text()
        .split('\n')
        .filter((line) => line.includes(id));
      expect(mine).toHaveLength(2);
      if (!json) {
        expect(mine[0]).toMatch(
          new RegExp(`WARN \\[OutboxWorker\\] Outbox event ${id} \\(l\\.fails\\) attempt 1 of 2 failed; retrying`),
        );
        expect(mine.join('\n')).not.toMatch(/Object|eventId|\{/);
      } else {
        const [warn, dead] = mine.map(
          (line) => JSON.parse(line) as { level: string; message: Record<string, unknown> },
        );
        expect(warn).toMatchObject({
          level: 'warn',
          context: 'OutboxWorker',
          message: { eventId: id, topic: 'l.fails' },
        });
        expect(String(warn.message.msg)).toMatch(/attempt 1 of 2 failed/);
        expect(dead).toMatchObject({ level: 'error', message: { eventId: id, topic: 'l.fails' } });
      }
    }
  });
});
