/**
 * The suite Stryker runs against each mutant (`npm run test:mutation`, see stryker.config.mjs): the
 * TypeORM 0.3 project's unit and end-to-end tests on SQLite only, through better-sqlite3. The servers are marked down here rather than probed, so their suites are skipped
 * even when they are up; there is no globalSetup, whose probes would mark them up again (and, under
 * CI=true, fail on a server that is down). Do not set CI for this run.
 */
const { join } = require('node:path');

process.env.OUTBOX_TEST_POSTGRES = 'down';
process.env.OUTBOX_TEST_MARIADB = 'down';

const base = require('./jest.config.js');
const [typeorm03] = base.projects;
const plumbing = join(__dirname, 'test', 'fixtures', 'mutation');

/** @type {import('jest').Config} */
module.exports = {
  ...typeorm03,
  displayName: undefined,
  // The slowest test takes under 2 s here; a mutant that deadlocks one fails it after 10 s.
  testTimeout: 10_000,
  // Bail at a mutant's first failing test, and load only the files holding its covering tests.
  testEnvironment: join(plumbing, 'environment.js'),
  testSequencer: join(plumbing, 'sequencer.js'),
  // SQLite through better-sqlite3 only (see test/fixtures/mutation/backends.ts).
  moduleNameMapper: { '^((\\.\\./)+fixtures|\\.)/backends$': join(plumbing, 'backends.ts') },
  testPathIgnorePatterns: [
    '/node_modules/',
    // Packs the built package: it tests the packaging, not the instrumented lib/.
    '<rootDir>/test/package/',
    // Transports: they never reach the store or the dialects, and they need the brokers.
    '<rootDir>/test/e2e/transports/brokers.e2e-spec.ts',
    // Query plans of PostgreSQL and MariaDB: nothing left to run without the servers.
    '<rootDir>/test/e2e/delivery/claim-plan.e2e-spec.ts',
    // Worker processes started through ts-node (seconds of compiling each) and a 2,000-event soak: about
    // 18 s for every mutant it covers, and Stryker sees no coverage from inside the children. The
    // in-process tests of leases.e2e-spec.ts and failures-and-retries.e2e-spec.ts cover the same lease expiry,
    // redelivery and dead-lettering.
    '<rootDir>/test/e2e/delivery/processes.e2e-spec.ts',
  ],
};
