import {
  decodeRow,
  driverErrno,
  driverErrorCode,
  indexNames,
  quoteIdent,
  versionAtLeast,
} from '../../lib/dialects/shared/dialect.util';
import { dialectForType } from '../../lib/dialects/dialect-for-type';
import { outboxTable } from '../../lib/dialects/shared/outbox-table';
import { OUTBOX_SCHEMA_VERSIONS } from '../../lib/schema/outbox-migrations';

/**
 * The dialects' pure helpers, on inputs the SQLite end-to-end suite never produces (PostgreSQL's
 * parsed JSON and Date columns, MySQL's error numbers), so that mutation testing on SQLite checks
 * them too.
 */
describe('decodeRow', () => {
  const base = {
    id: 'e1',
    topic: 't',
    status: 'pending',
    attempts: '2',
    available_at: '2026-01-02T03:04:05.678Z',
    created_at: '2026-01-01T00:00:00.000Z',
  };

  it('parses JSON and times given as text (SQLite, MySQL)', () => {
    const event = decodeRow({
      ...base,
      key: 'k',
      dedupe_key: 'd',
      payload: '{"a":[1,{"b":null}]}',
      headers: '{"x":"y"}',
      claim_token: 'tok',
      completed_handlers: '["A.one","B.two"]',
      last_error: 'boom',
      expired_attempts: '1',
      last_expired_attempt: '1',
      note: 'attempt 1 of 5 did not finish',
      processed_at: '2026-01-03T00:00:00.000Z',
      claimed_at: '2026-01-02T03:03:05.678Z',
      // Each database writes times into JSON its own way: PostgreSQL with an offset, MySQL as set, SQLite as stored.
      attempt_log:
        '[{"attempt":1,"startedAt":"2026-01-02T03:00:00.123456+00:00","finishedAt":"2026-01-02T03:00:01.5Z",' +
        '"outcome":"failed","error":"boom","round":0},' +
        '{"attempt":2,"startedAt":"2026-01-02 03:01:00.000001","finishedAt":null,"outcome":"released","error":null,"round":1}]',
      redrive_count: '1',
      seq: '9007199254740991',
      trace_context: '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
    });
    expect(event).toEqual({
      id: 'e1',
      topic: 't',
      key: 'k',
      dedupeKey: 'd',
      payload: { a: [1, { b: null }] },
      headers: { x: 'y' },
      status: 'pending',
      attempts: 2,
      availableAt: new Date('2026-01-02T03:04:05.678Z'),
      claimToken: 'tok',
      completedHandlers: ['A.one', 'B.two'],
      lastError: 'boom',
      expiredAttempts: 1,
      lastExpiredAttempt: 1,
      note: 'attempt 1 of 5 did not finish',
      createdAt: new Date('2026-01-01T00:00:00.000Z'),
      processedAt: new Date('2026-01-03T00:00:00.000Z'),
      claimedAt: new Date('2026-01-02T03:03:05.678Z'),
      attemptLog: [
        {
          attempt: 1,
          startedAt: new Date('2026-01-02T03:00:00.123Z'),
          finishedAt: new Date('2026-01-02T03:00:01.500Z'),
          outcome: 'failed',
          error: 'boom',
          round: 0,
        },
        {
          attempt: 2,
          startedAt: new Date('2026-01-02T03:01:00.000Z'),
          finishedAt: null,
          outcome: 'released',
          error: null,
          round: 1,
        },
      ],
      redriveCount: 1,
      seq: 9007199254740991,
      traceContext: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    });
  });

  it('keeps JSON and Date values that the driver already parsed (PostgreSQL)', () => {
    const availableAt = new Date('2026-01-02T03:04:05.678Z');
    const payload = { list: ['[]', '{}'] };
    const event = decodeRow({
      ...base,
      payload,
      headers: { x: 'y' },
      completed_handlers: ['A.one'],
      available_at: availableAt,
      processed_at: null,
    });
    expect(event.payload).toBe(payload);
    expect(event.headers).toEqual({ x: 'y' });
    expect(event.completedHandlers).toEqual(['A.one']);
    expect(event.availableAt).toBe(availableAt);
    expect(event.processedAt).toBeNull();
  });

  it('reads empty JSON texts and absent optional columns as empty values and nulls', () => {
    const event = decodeRow({ ...base, payload: '[]', headers: '{}', completed_handlers: '[]' });
    expect(event.payload).toEqual([]);
    expect(event.headers).toEqual({});
    expect(event.completedHandlers).toEqual([]);
    expect(event).toMatchObject({ key: null, dedupeKey: null, claimToken: null, lastError: null, processedAt: null });
    expect(event).toMatchObject({ expiredAttempts: 0, lastExpiredAttempt: null, note: null });
    expect(event).toMatchObject({ claimedAt: null, attemptLog: [], redriveCount: 0, seq: null });
    // NULL in the JSON columns (never written by the outbox) reads as empty too.
    const nulls = decodeRow({ ...base, headers: null, completed_handlers: null });
    expect(nulls.headers).toEqual({});
    expect(nulls.completedHandlers).toEqual([]);
  });
});

describe('versionAtLeast', () => {
  it.each([
    ['3.35.0', '3.35.0', true],
    ['3.35', '3.35.0', true],
    ['3.35.0.1', '3.35.0', true],
    ['3.34.9', '3.35.0', false],
    ['3.36', '3.35.5', true],
    ['10.11.6-MariaDB-0+deb12u1', '10.6', true],
    ['no digits', '0.1', false],
  ])('%s against %s: %s', (found, minimum, expected) => {
    expect(versionAtLeast(found, minimum)).toBe(expected);
  });
});

describe('driver error codes, read through TypeORM’s wrapper or from the driver’s own error', () => {
  it.each([
    [
      'a wrapped error: the driver’s code first',
      { driverError: { code: 'ER_LOCK_DEADLOCK', errno: 1213 }, code: 'OTHER', errno: 1 },
      'ER_LOCK_DEADLOCK',
      1213,
    ],
    ['a driver error of its own', { code: '40P01', errno: 7 }, '40P01', 7],
    ['a wrapped error with an errno only', { driverError: { errno: 1205 } }, 1205, 1205],
    ['an error with an errno only', { errno: 1213 }, 1213, 1213],
    ['an error with neither', new Error('x'), undefined, undefined],
    ['undefined', undefined, undefined, undefined],
    ['null', null, undefined, undefined],
  ])('%s', (_name, error, code, errno) => {
    expect(driverErrorCode(error)).toBe(code);
    expect(driverErrno(error)).toBe(errno);
  });
});

describe('identifiers', () => {
  it('quotes a name, doubling any double quote in it', () => {
    expect(quoteIdent('outbox')).toBe('"outbox"');
    expect(quoteIdent('a"b""c')).toBe('"a""b""""c"');
  });

  it('names the indexes after the table, as the migration and the query-plan checks expect', () => {
    expect(indexNames('events')).toEqual({
      claim: 'events_claim_idx',
      dedupe: 'events_dedupe_idx',
      retention: 'events_retention_idx',
      order: 'events_order_idx',
      front: 'events_front_idx',
    });
  });
});

describe('schema steps', () => {
  it.each(['postgres', 'mysql', 'sqlite'])(
    '%s: every version of OutboxMigrations has a step, and no other version does',
    (type) => {
      const dialect = dialectForType(type);
      const table = outboxTable('outbox_event');
      for (const { version } of OUTBOX_SCHEMA_VERSIONS) {
        expect(Array.isArray(dialect.schema.upgrade(version, table))).toBe(true);
        expect(Array.isArray(dialect.schema.downgrade(version, table))).toBe(true);
      }
      const next = OUTBOX_SCHEMA_VERSIONS[OUTBOX_SCHEMA_VERSIONS.length - 1].version + 1;
      for (const version of [1, next]) {
        expect(() => dialect.schema.upgrade(version, table)).toThrow(
          `no outbox schema change leads to version ${version}`,
        );
        expect(() => dialect.schema.downgrade(version, table)).toThrow(
          `no outbox schema change leads to version ${version}`,
        );
      }
    },
  );
});
