import { runInNewContext } from 'node:vm';
import { OutboxHandlerTimeoutError } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import type { TestApp } from '../../fixtures/test-app';
import { workerApps } from '../../fixtures/worker-app';
import { drained } from '../../fixtures/drain-result';

/** Milliseconds from the database's now to an event's due time. */
const DUE_IN_MS: Record<BackendName, string> = {
  postgres: `extract(epoch FROM ("available_at" - now())) * 1000`,
  mariadb: 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "available_at") / 1000',
  sqlite3: `(julianday("available_at") - julianday('now')) * 86400000`,
  'better-sqlite3': `(julianday("available_at") - julianday('now')) * 86400000`,
};

/** How long until the event is due, by the database clock. */
async function dueInMs(app: TestApp, id: string): Promise<number> {
  const [{ ms }] = await app.raw.query<{ ms: number }>(
    `SELECT ${DUE_IN_MS[app.backend]} AS ms FROM "${app.table}" WHERE "id" = ?`,
    [id],
  );
  return Number(ms);
}

describe.each(backends())('failures and retries on %s', (backend) => {
  const start = workerApps(backend);

  it('retries with backoff, then dead-letters after maxAttempts and logs it', async () => {
    const { app, b, publish, row } = await start();
    const { id } = await publish('always.fails');
    const result = await app.worker.drain();
    expect(result).toMatchObject({ failed: 2, deadLettered: 1 });
    expect(b.calls.map((c) => c.message.attempt)).toEqual([1, 2, 3]);
    const stored = await row(id);
    expect(stored).toMatchObject({ status: 'dead', attempts: 3, claim_token: null });
    expect(stored.last_error).toMatch(/alwaysFails: Error: boom 3/);
    expect(stored.processed_at).not.toBeNull();
    expect(
      app.logger.matching(new RegExp(`Dead-lettered outbox event ${id} \\(always.fails\\) after attempt 3`)),
    ).toHaveLength(1);
    expect(
      app.logger.matching(/attempt [12] of 3 failed; retrying in \d+ ms or later: Handlers.alwaysFails: Error: boom/),
    ).toHaveLength(2);
  });

  it('waits out the backoff by the database clock', async () => {
    const { app, b, publish, row } = await start({
      retry: { maxAttempts: 5, initialDelayMs: 60_000, maxDelayMs: 60_000 },
    });
    // Pin the jitter draw to the middle of the range: the delay is then exactly 30 s.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.5);
    try {
      const { id } = await publish('always.fails');
      await app.worker.drain();
      // Rounded: SQLite's julianday arithmetic is floating point, and a fast run reads the clock in
      // the same millisecond the failure was written (30000.00004 is 30 s).
      const dueIn = Math.round(await dueInMs(app, id));
      expect(dueIn).toBeGreaterThan(25_000);
      expect(dueIn).toBeLessThanOrEqual(30_000);
      expect(await row(id)).toMatchObject({ status: 'pending', claim_token: null, attempts: 1 });
      // Not due yet: a drain leaves it alone.
      await app.worker.drain();
      expect(b.calls).toHaveLength(1);
    } finally {
      random.mockRestore();
    }
  });

  it('fails an event whose topic has no handler, retries it, and dead-letters it', async () => {
    const { app, publish, row } = await start();
    const { id } = await publish('nobody.listens');
    const result = await app.worker.drain();
    expect(result).toMatchObject({ failed: 2, deadLettered: 1 });
    const stored = await row(id);
    expect(stored.status).toBe('dead');
    expect(stored.attempts).toBe(3);
    expect(stored.last_error).toBe('no handler or route for topic "nobody.listens" in this application');
  });

  it("dead-letters at a handler's own maxAttempts, below the module's", async () => {
    // The module allows 3 attempts; the handler, 2.
    const { app, b, publish, row } = await start();
    const { id } = await publish('gives.up');
    expect(await app.worker.drain()).toMatchObject({ failed: 1, deadLettered: 1 });
    expect(b.calls.map((c) => `${c.handler}@${c.message.attempt}`)).toEqual(['givesUp@1', 'givesUp@2']);
    expect(await row(id)).toMatchObject({
      status: 'dead',
      attempts: 2,
      last_error: 'Handlers.givesUp: Error: gave up at 2',
    });
    expect(app.logger.matching(/ attempt 1 of 2 failed; retrying in /)).toHaveLength(1);
  });

  it('dead-letters at once on OutboxNonRetryableError', async () => {
    const { app, b, publish, row } = await start();
    const { id } = await publish('poison');
    await app.worker.drain();
    expect(b.calls).toHaveLength(1);
    expect(await row(id)).toMatchObject({ status: 'dead', attempts: 1 });
    expect(app.logger.matching(/\(non-retryable\)/)).toHaveLength(1);
  });

  it.each([['a string'], [undefined], [{ code: 42 }]])(
    'records a non-Error rejection (%p) as a failure and leaves nothing leased',
    async (value) => {
      const { app, b, publish, row } = await start({ retry: { maxAttempts: 1 } });
      b.reject = value;
      const { id } = await publish('odd.rejection');
      expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
      const stored = await row(id);
      expect(stored).toMatchObject({ status: 'dead', claim_token: null });
      expect(stored.last_error).toContain('non-Error rejection:');
      // The worker keeps working afterwards.
      await publish('plain');
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    },
  );

  describe('what a failure records', () => {
    const circular: Record<string, unknown> = { name: 'loop' };
    circular.self = circular;
    it.each([
      ['a string', 'a string', 'non-Error rejection: a string'],
      ['undefined', undefined, 'non-Error rejection: undefined'],
      ['an object with a code', { code: 42 }, 'non-Error rejection: code 42'],
      ['an object without a message or code', { status: 'bad' }, 'non-Error rejection: {"status":"bad"}'],
      ['an object JSON cannot write', circular, 'non-Error rejection: [object Object]'],
      ['an Error subclass', new TypeError('bad input'), 'TypeError: bad input'],
      ['an error made in another realm', runInNewContext(`new RangeError('elsewhere')`), 'RangeError: elsewhere'],
      ['an object shaped like an error', { name: 'DriverError', message: 'gone', code: 7 }, 'DriverError: gone'],
    ])('writes %s as its own text, prefixed by the handler', async (_name, value, text) => {
      const { app, b, publish, row } = await start({ retry: { maxAttempts: 1 } });
      b.reject = value;
      const { id } = await publish('rejects');
      expect(await app.worker.drain()).toEqual(drained({ deadLettered: 1 }));
      expect((await row(id)).last_error).toBe(`Handlers.rejects: ${text}`);
    });

    it('waits as long as the longest Retry-After a handler asks for, capped at one day', async () => {
      const { app, publish } = await start({ retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 } });
      const soon = await publish('retry.later', { afterMs: 120_000 });
      const never = await publish('retry.later', { afterMs: 30 * 86_400_000 });
      expect(await app.worker.drain()).toMatchObject({ failed: 2, deadLettered: 0 });
      expect(await dueInMs(app, soon.id)).toBeGreaterThan(100_000);
      expect(await dueInMs(app, soon.id)).toBeLessThan(120_001);
      expect(await dueInMs(app, never.id)).toBeGreaterThan(86_400_000 - 20_000);
      expect(await dueInMs(app, never.id)).toBeLessThan(86_400_001);
      expect(
        app.logger.matching(/attempt 1 of 5 failed; retrying in 120000 ms or later: Handlers.retryLater: /),
      ).toHaveLength(1);
      expect(app.logger.matching(/attempt 1 of 5 failed; retrying in 86400000 ms or later/)).toHaveLength(1);
    });
  });

  it('times a handler out, aborts its signal and records the failure', async () => {
    const { app, b, publish, row } = await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('slow');
    await app.worker.drain();
    expect(b.seenSignal?.aborted).toBe(true);
    expect((await row(id)).last_error).toMatch(/did not finish within its timeout of 50 ms/);
  });

  it('hands a handler that reads its signal only after its timeout a signal already aborted, with the timeout as reason', async () => {
    const { app, b, publish, row } = await start({ retry: { maxAttempts: 1 } });
    const { id } = await publish('late.signal');
    expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
    expect((await row(id)).last_error).toBe(
      'Handlers.lateSignal: OutboxHandlerTimeoutError: handler did not finish within its timeout of 50 ms',
    );
    b.gate.resolve();
    const signal = await b.readSignal.promise;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(OutboxHandlerTimeoutError);
    expect(signal.reason).toMatchObject({
      timeoutMs: 50,
      message: 'handler did not finish within its timeout of 50 ms',
    });
  });
});
