import type { PoolClient } from 'pg';
import { describeOn } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

interface Pool {
  connect(): Promise<PoolClient>;
}

describeOn('postgres')('the DataSource’s PostgreSQL pool with the outbox', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp({ backend: 'postgres' });
  });
  afterAll(() => app.dispose());

  it('survives an error on a client the pool has just handed over (else an unhandled error event ends the process)', async () => {
    const pool = (app.dataSource.driver as unknown as { master: Pool }).master;
    // Checked out, the pool's own listener is gone; TypeORM attaches its listener a promise later. An
    // error in between (a backend terminated while the client connects) has only the module's listener.
    const client = await pool.connect();
    try {
      expect(() =>
        client.emit('error', new Error('terminating connection due to administrator command')),
      ).not.toThrow();
    } finally {
      client.release(new Error('the connection failed'));
    }
    // The application's own queries go on.
    await expect(app.dataSource.query('SELECT 1 AS "one"')).resolves.toEqual([{ one: 1 }]);
  });
});
