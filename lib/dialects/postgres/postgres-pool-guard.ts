import type { DataSource } from 'typeorm';

/** node-postgres clients, as far as the guard needs them. */
interface PoolClient {
  on(event: 'error', listener: (error: unknown) => void): unknown;
}
interface Pool {
  on(event: 'connect', listener: (client: PoolClient) => void): unknown;
  /** pg-pool's clients, idle or checked out. */
  _clients?: PoolClient[];
}

const GUARDED = Symbol.for('nestjs-typeorm-outbox.pool-guard');
const ignore = () => undefined;

/**
 * A node-postgres client whose connection the server ends (a terminated backend, a restart, a failover)
 * emits 'error', and an 'error' event nobody listens to ends the process. An idle client has pg-pool's
 * listener and a client in use TypeORM's, but there is a gap between them: pg-pool removes its listener
 * when it hands a client over, and TypeORM attaches its own a promise later. A FATAL message read in
 * between (in the same chunk as the end of the connection's start-up, say) ended worker processes in
 * the fault suite's connection-cut scenario. So every client of the DataSource's pool also gets, as
 * the pool creates it, a listener that ignores the event: queries still reject with the error, and
 * the pool still drops the client.
 */
export function guardPoolClients(dataSource: DataSource): void {
  const pool = (dataSource.driver as unknown as { master?: Pool & { [GUARDED]?: boolean } }).master;
  if (!pool || typeof pool.on !== 'function' || pool[GUARDED]) return;
  pool[GUARDED] = true;
  pool.on('connect', (client) => client.on('error', ignore));
  for (const client of pool._clients ?? []) client.on('error', ignore);
}
