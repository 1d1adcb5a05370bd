/**
 * The fault suite (`npm run test:faults`): worker processes killed, databases restarted, clocks
 * skewed, broken store variants, and a property test of the claim state machine. Slower than the
 * contract suite and hard on the servers (it restarts them), so it runs on its own, after it.
 */
/**
 * `npm run test:faults` runs it in two phases: every file but the ones that take a server down for every test on
 * it, on two workers at once (their scenarios wait on leases, kills and restarts of their own workers, each on
 * tables of its own: about 14 minutes where one after another took 23), then those alone (`SERIAL`: servers
 * restarted, every connection of the test database cut). `OUTBOX_FAULT_PHASE=parallel` leaves those out, `serial`
 * runs only them; unset (a file run by hand), every file matches.
 */
const SERIAL = ['<rootDir>/test/faults/outage.fault-spec.ts'];
const phase = process.env.OUTBOX_FAULT_PHASE;
if (phase !== undefined && phase !== 'parallel' && phase !== 'serial') {
  throw new Error(`OUTBOX_FAULT_PHASE is "${phase}": expected parallel, serial, or nothing`);
}

/** @type {import('jest').Config} */
module.exports = {
  rootDir: '.',
  globalSetup: '<rootDir>/test/faults/fixtures/report-setup.ts',
  globalTeardown: '<rootDir>/test/faults/fixtures/report-teardown.ts',
  testEnvironment: 'node',
  testEnvironmentOptions: { globalsCleanup: 'off' },
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  setupFiles: ['reflect-metadata'],
  testMatch: phase === 'serial' ? SERIAL : ['<rootDir>/test/faults/**/*.fault-spec.ts'],
  testPathIgnorePatterns: ['/node_modules/', ...(phase === 'parallel' ? SERIAL : [])],
  // Stryker's sandboxes hold a copy of the project.
  modulePathIgnorePatterns: ['<rootDir>/.stryker-tmp/'],
  globals: { OUTBOX_TYPEORM: '0.3' },
  testTimeout: 300_000,
  verbose: true,
};
