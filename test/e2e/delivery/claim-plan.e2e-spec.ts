import { describeEachServer } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

const DELIVERED = 100_000;
const PENDING = 500;

/** Fills the table with delivered history and a little pending work, all by SQL, in a few statements. */
async function fill(app: TestApp) {
  if (app.backend === 'postgres') {
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "status", "attempts", "available_at", "processed_at")
       SELECT gen_random_uuid(), 'bulk', '{}'::jsonb, CASE WHEN n <= ${DELIVERED} THEN 'delivered' ELSE 'pending' END,
              1, now() - n * interval '1 second', now()
       FROM generate_series(1, ${DELIVERED + PENDING}) AS n`,
    );
    await app.raw.query(`ANALYZE "${app.table}"`);
  } else {
    await app.raw.query(
      `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "status", "attempts", "available_at",
                                   "completed_handlers", "created_at", "processed_at")
       SELECT UUID(), 'bulk', '{}', '{}', IF(seq <= ${DELIVERED}, 'delivered', 'pending'), 1,
              UTC_TIMESTAMP(6) - INTERVAL seq SECOND, '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)
       FROM seq_1_to_${DELIVERED + PENDING}`,
    );
    await app.raw.query(`ANALYZE TABLE "${app.table}"`);
  }
}

/**
 * The claim must read the claim index in its ORDER BY order: a filesort or a full scan would make
 * InnoDB lock the whole pending set (a second worker then gets nothing) and make claims cost more as
 * history grows.
 */
describeEachServer('the claim query plan on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it(`uses the claim index without sorting, with ${DELIVERED.toLocaleString('en')} delivered rows kept`, async () => {
    app = await createTestApp({ backend });
    await fill(app);
    const store = app.store;
    const { sql, params } = store.dialect.claimSelection(store.table, 50);
    const claimIndex = `${app.table}_claim_idx`;
    if (backend === 'postgres') {
      const plan = (await app.raw.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params))
        .map((r) => r['QUERY PLAN'])
        .join('\n');
      expect(plan).toContain(`Index Scan using ${claimIndex}`);
      expect(plan).not.toMatch(/Seq Scan|Sort/);
    } else {
      const [row] = await app.raw.query<{ type: string; key: string; Extra: string | null; rows: number }>(
        `EXPLAIN ${sql}`,
        params,
      );
      expect(row.key).toBe(claimIndex);
      expect(row.type).not.toBe('ALL');
      expect(row.Extra ?? '').not.toMatch(/filesort/i);
    }
    // And the claim itself takes the oldest due rows.
    const claimed = await app.store.claim({ batchSize: 50, leaseMs: 60_000, maxAttempts: 5 });
    expect(claimed.events).toHaveLength(50);
  });
});
