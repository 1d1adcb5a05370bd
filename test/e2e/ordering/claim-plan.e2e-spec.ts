import { OutboxOperations } from '../../../lib';
import { KeyOrderStatements } from '../../../lib/ordering/key-order-statements';
import { describeEachServer } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

const DELIVERED = 1_000_000;
const BLOCKED_KEYS = 100_000;
const PENDING = 500;

/**
 * Fills the table by SQL, in a few statements: delivered history, `BLOCKED_KEYS` keys whose front is
 * dead (`deadHead: 'block'`) with one event waiting behind each, and a little unordered work that is due.
 * Key n's dead front and waiting event have ids that spell n, so the keys' table can name its front.
 */
async function fill(app: TestApp) {
  const keys = `"${app.table}_keys"`;
  if (app.backend === 'postgres') {
    const id = (tail: string) => `(lpad(to_hex(n), 8, '0') || '-0000-4000-8000-00000000000${tail}')::uuid`;
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "status", "attempts", "available_at", "processed_at")
       SELECT gen_random_uuid(), 'bulk', '{}'::jsonb, CASE WHEN n <= ${DELIVERED} THEN 'delivered' ELSE 'pending' END,
              1, now() - n * interval '1 millisecond', now()
       FROM generate_series(1, ${DELIVERED + PENDING}) AS n`,
    );
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "status", "attempts", "available_at", "processed_at",
                                   "key", "seq")
       SELECT ${id('1')}, 'ordered.placed', '{}'::jsonb, 'dead', 5, now(), now(), 'k' || n, 1
       FROM generate_series(1, ${BLOCKED_KEYS}) AS n
       UNION ALL
       SELECT ${id('2')}, 'ordered.placed', '{}'::jsonb, 'waiting', 0, now(), NULL, 'k' || n, 2
       FROM generate_series(1, ${BLOCKED_KEYS}) AS n`,
    );
    await app.raw.query(
      `INSERT INTO ${keys} ("key", "last_seq", "front_id")
       SELECT 'k' || n, 2, ${id('1')} FROM generate_series(1, ${BLOCKED_KEYS}) AS n`,
    );
    await app.raw.query(`ANALYZE "${app.table}"`);
    await app.raw.query(`ANALYZE ${keys}`);
  } else {
    const id = (tail: string) => `CONCAT(LPAD(LOWER(HEX(seq)), 8, '0'), '-0000-4000-8000-00000000000${tail}')`;
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "status", "attempts", "available_at",
                                   "completed_handlers", "created_at", "processed_at")
       SELECT UUID(), 'bulk', '{}', '{}', IF(seq <= ${DELIVERED}, 'delivered', 'pending'), 1,
              UTC_TIMESTAMP(6) - INTERVAL seq * 1000 MICROSECOND, '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)
       FROM seq_1_to_${DELIVERED + PENDING}`,
    );
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "status", "attempts", "available_at",
                                   "completed_handlers", "created_at", "processed_at", "key", "seq")
       SELECT ${id('1')}, 'ordered.placed', '{}', '{}', 'dead', 5, UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6),
              UTC_TIMESTAMP(6), CONCAT('k', seq), 1
       FROM seq_1_to_${BLOCKED_KEYS}
       UNION ALL
       SELECT ${id('2')}, 'ordered.placed', '{}', '{}', 'waiting', 0, UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6),
              NULL, CONCAT('k', seq), 2
       FROM seq_1_to_${BLOCKED_KEYS}`,
    );
    await app.raw.query(
      `INSERT INTO ${keys} ("key", "last_seq", "front_id")
       SELECT CONCAT('k', seq), 2, ${id('1')} FROM seq_1_to_${BLOCKED_KEYS}`,
    );
    await app.raw.query(`ANALYZE TABLE "${app.table}", ${keys}`);
  }
}

/** What the database plans for `sql`: PostgreSQL's plan text, or MySQL's rows (table, index, access type, extra). */
async function explain(app: TestApp, sql: string, params: unknown[]) {
  if (app.backend === 'postgres') {
    const rows = await app.raw.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params);
    return { text: rows.map((r) => r['QUERY PLAN']).join('\n'), rows: [] };
  }
  const rows = await app.raw.query<{ table: string; type: string; key: string | null; Extra: string | null }>(
    `EXPLAIN ${sql}`,
    params,
  );
  return { text: '', rows };
}

/**
 * Per-key order keeps the claim as it was: the events waiting behind a key's front, blocked or not, are
 * outside the claim index, so a big history and many blocked keys cost the claim nothing; a run's
 * followers are read from the order index, one key at a time.
 */
describeEachServer('the claim query plan with blocked keys on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it(`claims and takes a run from their indexes, with ${DELIVERED.toLocaleString('en')} delivered rows and ${BLOCKED_KEYS.toLocaleString('en')} blocked keys kept`, async () => {
    app = await createTestApp({ backend, outbox: { ordering: [{ topic: 'ordered.*' }] } });
    await fill(app);
    const { dialect, table } = app.store;
    const claim = dialect.claimSelection(table, 50);
    const keyOrder = new KeyOrderStatements(dialect.flavor, table);
    const followers = app.store.keys.runs.followers('k77', 1, 50);
    const claimPlan = await explain(app, claim.sql, claim.params);
    const followersPlan = await explain(app, followers.sql, followers.params);
    const move = keyOrder.moveFronts(
      ['k77', 'k78'],
      ['0000004d-0000-4000-8000-000000000001', '0000004e-0000-4000-8000-000000000001'],
    );
    const movePlan = await explain(app, move.sql, move.params);
    const claimIndex = `${app.table}_claim_idx`;
    const orderIndex = `${app.table}_order_idx`;
    if (backend === 'postgres') {
      expect(claimPlan.text).toContain(`Index Scan using ${claimIndex}`);
      expect(claimPlan.text).not.toMatch(/Seq Scan|Sort/);
      expect(followersPlan.text).toContain(`Index Scan using ${orderIndex}`);
      expect(followersPlan.text).not.toMatch(/Seq Scan|Sort/);
      expect(movePlan.text).toContain(`Index Scan using ${orderIndex}`);
      expect(movePlan.text).not.toMatch(/Seq Scan|Sort/);
    } else {
      expect(claimPlan.rows[0]).toMatchObject({ key: claimIndex });
      expect(claimPlan.rows[0].type).not.toBe('ALL');
      expect(claimPlan.rows[0].Extra ?? '').not.toMatch(/filesort/i);
      expect(followersPlan.rows[0]).toMatchObject({ key: orderIndex });
      expect(followersPlan.rows[0].Extra ?? '').not.toMatch(/filesort/i);
      // A front's move reads each key's next event from the order index (left to itself, MariaDB's planner
      // read every event for each key once its statistics were refreshed mid-drain).
      expect(movePlan.rows.find((r) => r.table === 'e')).toMatchObject({ key: orderIndex });
      // An acknowledgement locks its keys' rows and reads their new fronts by primary key, never through
      // the whole keys' table (a scan waits for every row other transactions hold).
      for (const statement of [keyOrder.lockKeys(['k77', 'k78'])!, keyOrder.frontsOf(['k77', 'k78'])]) {
        const plan = await explain(app, statement.sql, statement.params);
        expect(plan.rows.map((r) => [r.type, r.key])).toEqual([['range', 'PRIMARY']]);
      }
    }
    // The claim takes the oldest due unordered rows, none of the blocked keys' events; the keys count as blocked.
    const claimed = await app.store.claim({ batchSize: 50, leaseMs: 60_000, maxAttempts: 5 });
    expect(claimed.events).toHaveLength(50);
    expect(new Set(claimed.events.map((e) => e.topic))).toEqual(new Set(['bulk']));
    expect((await app.module.get(OutboxOperations).stats()).blockedKeys).toBe(BLOCKED_KEYS);
    // Filling 1.2 million rows takes 20 s alone and up to two minutes beside the parallel phase's other files.
  }, 240_000);
});
