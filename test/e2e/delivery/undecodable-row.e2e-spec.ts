import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { OutboxHandler, type OutboxMessage } from '../../../lib';
import { backends, describeOn, type BackendName } from '../../fixtures/backends';
import { mariadbUrl } from '../../fixtures/env';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Recorder {
  calls: OutboxMessage[] = [];

  @OutboxHandler('plain')
  handle(m: OutboxMessage) {
    this.calls.push(m);
  }
}

const UNDECODABLE = /^the stored row cannot be decoded \(SyntaxError: [^)]+\); it was dead-lettered without delivery$/;

/**
 * Makes a stored row's headers undecodable, the way each database can hold it. SQLite and MariaDB keep
 * headers as text: JSON cut short (as MariaDB's `sql_mode=''` truncation leaves it) is stored as is.
 * PostgreSQL's jsonb refuses invalid JSON, and so does every jsonb column; what it can hold is valid
 * JSON of the wrong shape — here a string holding the cut-short text (JSON encoded twice by a
 * hand-written insert), which the decoder parses again and fails on.
 */
async function corruptHeaders(app: TestApp, id: string): Promise<void> {
  const cut = '{"a":"tr';
  const value = app.backend === 'postgres' ? 'to_jsonb(CAST(? AS text))' : '?';
  await app.raw.query(`UPDATE "${app.table}" SET "headers" = ${value} WHERE "id" = ?`, [cut, id]);
}

async function expectBadRowAloneDeadLettered(app: TestApp, badId: string, goodIds: string[]) {
  const result = await app.worker.drain();
  expect(result).toMatchObject({ delivered: 3, deadLettered: 1, failed: 0, lostLeases: 0 });
  const recorder = app.module.get(Recorder);
  expect(recorder.calls.map((m) => m.id).sort()).toEqual([...goodIds].sort());

  const byId = new Map((await outboxRows(app)).map((r) => [r.id, r]));
  for (const id of goodIds) expect(byId.get(id)).toMatchObject({ status: 'delivered', claim_token: null });
  const bad = byId.get(badId)!;
  expect(bad).toMatchObject({ status: 'dead', claim_token: null });
  expect(bad.last_error).toMatch(UNDECODABLE);
  expect(await app.outbox.counts()).toMatchObject({ inFlight: 0, pending: 0, delivered: 3, dead: 1 });
  expect(
    app.logger.matching(new RegExp(`^Dead-lettered outbox event ${badId}: the stored row cannot be decoded`)),
  ).toHaveLength(1);
}

describe.each(backends())('a claimed row that cannot be decoded on %s', (backend: BackendName) => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it('is dead-lettered alone with the reason; its batch-mates are delivered and nothing stays leased', async () => {
    app = await createTestApp({ backend, providers: [Recorder] });
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2, 3].map((n) => ({ topic: 'plain', payload: { n }, headers: { n: String(n) } }))),
    );
    const [bad, ...good] = published.map((p) => p.id);
    await corruptHeaders(app, bad);
    await expectBadRowAloneDeadLettered(app, bad, good);
  });
});

// MariaDB only: the silent truncation below is MySQL/MariaDB behaviour under a non-strict sql_mode;
// PostgreSQL and SQLite refuse or keep an oversized value whole. Skipped when no MariaDB server is up.
describeOn('mariadb')('headers truncated by MariaDB with sql_mode=""', () => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it('leave a row that is dead-lettered alone, while the events claimed with it are delivered', async () => {
    app = await createTestApp({ backend: 'mariadb', providers: [Recorder] });
    const good = (
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany([0, 1, 2].map((n) => ({ topic: 'plain', payload: { n } }))),
      )
    ).map((p) => p.id);

    // sql_mode is per connection: a legacy application's own connection, not the outbox's.
    const { createConnection } = await import('mysql2/promise');
    const legacy = await createConnection({ uri: mariadbUrl() });
    const bad = randomUUID();
    try {
      await legacy.query("SET SESSION sql_mode = ''");
      await legacy.query(
        `INSERT INTO \`${app.table}\` (\`id\`, \`topic\`, \`payload\`, \`headers\`, \`available_at\`, ` +
          "`completed_handlers`, `created_at`) VALUES (?, 'plain', '{}', ?, UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6))",
        [bad, JSON.stringify({ big: 'x'.repeat(70_000) })],
      );
    } finally {
      await legacy.end();
    }
    const [{ stored }] = await app.raw.query<{ stored: number }>(
      `SELECT LENGTH("headers") AS stored FROM "${app.table}" WHERE "id" = ?`,
      [bad],
    );
    // Cut at the text column's 65,535 bytes without an error: the cause this test reproduces.
    expect(Number(stored)).toBe(65_535);

    await expectBadRowAloneDeadLettered(app, bad, good);
  });
});
