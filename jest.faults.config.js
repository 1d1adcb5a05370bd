/**
 * The fault suite (`npm run test:faults`): worker processes killed, databases restarted, clocks
 * skewed, broken store variants, and a property test of the claim state machine. Slower than the
 * contract suite and hard on the servers (it restarts them), so it runs on its own, after it.
 */
/** @type {import('jest').Config} */
module.exports = {
  rootDir: '.',
  globalSetup: '<rootDir>/test/faults/fixtures/report-setup.ts',
  globalTeardown: '<rootDir>/test/faults/fixtures/report-teardown.ts',
  testEnvironment: 'node',
  testEnvironmentOptions: { globalsCleanup: 'off' },
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  setupFiles: ['reflect-metadata'],
  testMatch: ['<rootDir>/test/faults/**/*.fault-spec.ts'],
  // Stryker's sandboxes hold a copy of the project.
  modulePathIgnorePatterns: ['<rootDir>/.stryker-tmp/'],
  globals: { OUTBOX_TYPEORM: '0.3' },
  testTimeout: 300_000,
  verbose: true,
};
