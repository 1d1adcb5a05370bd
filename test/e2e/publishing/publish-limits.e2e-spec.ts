import { Injectable } from '@nestjs/common';
import { OutboxHandler, OutboxValidationError, type OutboxMessage } from '../../../lib';
import { OutboxHeadersTooLargeError } from '../../../lib/errors/outbox.errors';
import { MAX_HEADERS_BYTES } from '../../../lib/publishing/outbox.validation';
import { backends, describeOn } from '../../fixtures/backends';
import { headersOfBytes } from '../../fixtures/headers';
import { createTestApp, emptyTestApp, onMariadb, outboxRows, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Recorder {
  readonly seen: OutboxMessage[] = [];
  @OutboxHandler('order.placed')
  onPlaced(message: OutboxMessage) {
    this.seen.push(message);
  }
}

const rocket = '🚀';
const high = rocket.slice(0, 1);
const low = rocket.slice(1);

/**
 * mysql2 with `sql_mode=''` on every connection of the pool, set as each one opens (before TypeORM
 * runs anything on it): how a legacy MySQL application runs. GLOBAL would reach other test files.
 */
function laxMysql2() {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const mysql2 = require('mysql2') as typeof import('mysql2');
  return {
    ...mysql2,
    createPool(config: import('mysql2').PoolOptions) {
      const pool = mysql2.createPool(config);
      pool.on('connection', (connection) => {
        connection.query("SET SESSION sql_mode = ''", (error) => {
          if (error) connection.destroy();
        });
      });
      return pool;
    },
  };
}

describe.each(backends())('strings and sizes the databases cannot take, on %s', (backend) => {
  let app: TestApp;
  let recorder: Recorder;
  // One app for the suite; each test starts on an empty table and with nothing seen.
  beforeAll(async () => {
    app = await createTestApp({ backend, providers: [Recorder] });
    recorder = app.module.get(Recorder);
  });
  beforeEach(async () => {
    await emptyTestApp(app);
    recorder.seen.length = 0;
  });
  afterAll(() => app.dispose());

  const orderCount = async () =>
    Number((await app.raw.query<{ n: number }>(`SELECT count(*) AS n FROM "${app.ordersTable}"`))[0].n);

  it('refuses a lone surrogate in a payload, a key of it, or a header before any SQL; the transaction goes on', async () => {
    const refused = await app.txHost.withTransaction(async () => {
      const errors = [];
      for (const [payload, headers] of [
        [`cut ${high}`, undefined],
        [{ deep: [{ text: `${low} cut` }] }, undefined],
        [{ [`name ${high}`]: 1 }, undefined],
        [{}, { 'x-title': `cut ${high}` }],
      ] as const) {
        errors.push(await app.outbox.publish('order.placed', payload, { headers }).catch((e: unknown) => e));
      }
      // On PostgreSQL a failed statement would have aborted the transaction: these must still commit.
      await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), [
        'o-1',
        rocket,
      ]);
      await app.outbox.publish('order.placed', { text: rocket }, { headers: { 'x-title': rocket } });
      return errors;
    });
    for (const error of refused) {
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as Error).message).toMatch(/lone UTF-16 surrogate/);
    }
    expect(refused.map((e) => (e as OutboxValidationError).field)).toEqual([
      'payload',
      'payload',
      'payload',
      'headers',
    ]);
    expect(await orderCount()).toBe(1);
    expect(await outboxRows(app)).toHaveLength(1);
    await app.worker.drain();
    expect(recorder.seen.map((m) => [m.payload, m.headers])).toEqual([[{ text: rocket }, { 'x-title': rocket }]]);
  });

  it(`refuses headers one byte over ${MAX_HEADERS_BYTES} bytes, and stores and delivers exactly that many whole`, async () => {
    const over = headersOfBytes(MAX_HEADERS_BYTES + 1, 'é');
    const error = await app.txHost
      .withTransaction(() => app.outbox.publish('order.placed', {}, { headers: over }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxHeadersTooLargeError);
    expect(error).toMatchObject({ field: 'headers', bytes: MAX_HEADERS_BYTES + 1, limit: MAX_HEADERS_BYTES });
    expect(await outboxRows(app)).toHaveLength(0);

    const ascii = headersOfBytes(MAX_HEADERS_BYTES);
    const accented = headersOfBytes(MAX_HEADERS_BYTES, 'é');
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([
        { topic: 'order.placed', payload: { n: 1 }, headers: ascii },
        { topic: 'order.placed', payload: { n: 2 }, headers: accented },
      ]),
    );
    await app.worker.drain();
    const byN = new Map(recorder.seen.map((m) => [(m.payload as { n: number }).n, m.headers]));
    expect(byN.get(1)).toEqual(ascii);
    expect(byN.get(2)).toEqual(accented);
  });

  it('writes a publishMany larger than one statement can carry, all of it', async () => {
    // More rows than one INSERT takes on any backend (65,535 parameters, 8 per row, on PostgreSQL).
    const total = 8300;
    const results = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: total }, (_, n) => ({ topic: 'quick', payload: { n } }))),
    );
    expect(new Set(results.map((r) => r.id)).size).toBe(total);
    const rows = await app.raw.query<{ payload: unknown }>(`SELECT "payload" FROM "${app.table}"`);
    const numbers = rows.map(
      (r) => ((typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload) as { n: number }).n,
    );
    expect(numbers.sort((a: number, b: number) => a - b)).toEqual(Array.from({ length: total }, (_, n) => n));
  });
});

// MariaDB only: sql_mode is a MySQL/MariaDB setting, and without its strict modes an oversized value
// is cut silently instead of failing.
describeOn('mariadb')('headers on MariaDB with sql_mode=""', () => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it('refuses the largest headers the per-header limits allow, and stores 16 KiB whole', async () => {
    app = await createTestApp({
      backend: 'mariadb',
      providers: [Recorder],
      extraTypeOrm: { driver: laxMysql2(), connectorPackage: 'mysql2' } as never,
    });
    const [{ mode }] = await app.txHost.withTransaction(() =>
      app.txHost.tx.query<Array<{ mode: string }>>('SELECT @@SESSION.sql_mode AS mode'),
    );
    expect(mode).toBe('');

    const largest = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`h${i}`, 'x'.repeat(4096)]));
    const error = await app.txHost
      .withTransaction(() => app.outbox.publish('order.placed', {}, { headers: largest }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxHeadersTooLargeError);
    expect(await outboxRows(app)).toHaveLength(0);

    const headers = headersOfBytes(MAX_HEADERS_BYTES, 'é');
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', {}, { headers }));
    const [row] = await app.raw.query<{ headers: string }>('SELECT "headers" FROM "' + app.table + '" WHERE "id" = ?', [
      id,
    ]);
    expect(Buffer.byteLength(row.headers)).toBe(MAX_HEADERS_BYTES);
    await app.worker.drain();
    expect(app.module.get(Recorder).seen.map((m) => m.headers)).toEqual([headers]);
  });
});

onMariadb('statements over max_allowed_packet on MariaDB', ({ admin, disposeAfter }) => {
  let app: TestApp;

  it('commits a publishMany whose events together exceed max_allowed_packet, in several statements', async () => {
    app = disposeAfter(await createTestApp({ backend: 'mariadb' }));
    const [{ packet }] = await admin().query<{ packet: number }>('SELECT @@max_allowed_packet AS packet');
    const filler = 'x'.repeat(90_000);
    const count = Math.ceil((1.5 * Number(packet)) / filler.length);
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(
        Array.from({ length: count }, (_, i) => ({ topic: 'order.placed', payload: { i, filler } })),
      ),
    );
    expect(published.filter((p) => p.inserted)).toHaveLength(count);
    const [{ n, bytes }] = await app.raw.query<{ n: number; bytes: number }>(
      `SELECT COUNT(*) AS n, SUM(LENGTH(\`payload\`)) AS bytes FROM \`${app.table}\``,
    );
    expect(Number(n)).toBe(count);
    expect(Number(bytes)).toBeGreaterThan(Number(packet));
  });
});
