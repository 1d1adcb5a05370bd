import { startNodeProcess } from '../../fixtures/child';
import { backends, isSqlite, rawDb, removeSqliteFile, sqliteFile, uniqueName } from '../../fixtures/backends';
import type { Refusal, RefusalConfig } from '../../fixtures/refused-start';

/** What each refusal throws: the error's class and, for a configuration error, its option. */
const refusals: Array<[Refusal, string]> = [
  ['missing-table', 'OutboxTableMissingError'],
  ['two-globals', 'OutboxConfigurationError isGlobal'],
  ['shared-registry', 'OutboxConfigurationError metrics.prometheus'],
  ['shared-meter-provider', 'OutboxConfigurationError metrics.openTelemetry'],
  ['handler-option', "OutboxConfigurationError @OutboxHandler('refused.start') on TwoHandlersOfOneName.b"],
  ['async-option', 'OutboxConfigurationError worker.batchSize'],
];

/**
 * RELIABILITY case 42: a script that catches a start-up refusal exits on its own. Nest runs no shutdown
 * hook after a failed start, and `createApplicationContext()` returns nothing to close: whatever the
 * refusal, the outbox closes what the start-up opened (the pools, the wake-up channel). The bound is
 * Jest's test timeout: a pool left open keeps the child alive for ever (the script keeps pg's idle
 * connections, as MariaDB's pool does).
 */
describe.each(backends())('a refused start-up on %s', (backend) => {
  it.each(refusals)('%s: the script that caught the error exits on its own', async (refusal, expected) => {
    const tables: [string, string] = [uniqueName('refused'), uniqueName('refused')];
    const sqlitePath = isSqlite(backend) ? sqliteFile() : undefined;
    const config: RefusalConfig = { backend, refusal, tables, sqlitePath };
    const child = startNodeProcess('test/fixtures/refused-start.ts', { OUTBOX_REFUSAL: JSON.stringify(config) });
    try {
      expect(await child.waitFor(/^(REFUSED|STARTED)/)).toBe(`REFUSED ${expected}`);
      expect(await child.exited).toEqual({ code: 0, signal: null });
      expect(child.stderr()).toBe('');
    } finally {
      // A child that did not exit on its own (the test failed) is not left behind.
      if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
      await child.exited;
      if (sqlitePath) removeSqliteFile(sqlitePath);
      else {
        const raw = await rawDb(backend);
        for (const table of tables) {
          await raw.query(`DROP TABLE IF EXISTS "${table}", "${table}_migrations", "${table}_keys"`);
        }
        await raw.close();
      }
    }
  });
});
