import { Writable } from 'node:stream';
import { ConsoleLogger, Injectable, type LoggerService } from '@nestjs/common';
import { Logger as PinoNestLogger, LoggerModule } from 'nestjs-pino';
import { OutboxHandler } from '../../../lib';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Handlers {
  @OutboxHandler('l.fails')
  fails() {
    throw new Error('the card service refused: password=hunter2');
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
    const { lines, stream } = jsonLines();
    app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [Handlers],
      imports: [LoggerModule.forRoot({ pinoHttp: [{ level: 'info' }, stream] })],
      outbox,
    });
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
    expect(JSON.stringify(lines)).not.toContain('hunter2');
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
