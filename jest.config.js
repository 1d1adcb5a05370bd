/**
 * Two projects: the whole suite on TypeORM 0.3, and the end-to-end suite again on TypeORM 1.x (the
 * npm alias `typeorm1`), so every backend runs on both TypeORM lines in every run.
 */
const common = {
  rootDir: '.',
  testEnvironment: 'node',
  // TypeORM keeps its metadata on globalThis on purpose; Jest's cleanup of globals only warns about it.
  testEnvironmentOptions: { globalsCleanup: 'off' },
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  setupFiles: ['reflect-metadata'],
  // The docs' snippets import the package by name (test/e2e/testing/readme-recipe.e2e-spec.ts).
  moduleNameMapper: { '^nestjs-typeorm-outbox$': '<rootDir>/lib/index.ts' },
};

/**
 * `npm test` runs the suite in two phases: every file on several workers at once (most tests wait on
 * timers, leases and polls, and each uses tables, files and channels of its own), then, alone, the files
 * that change what every other test would see: a database server's global settings (SET GLOBAL), or a
 * message broker stopped and started again.
 * `OUTBOX_TEST_PHASE=parallel` leaves those out, `serial` runs only them; unset (a file run by hand),
 * every file matches.
 */
const SERIAL = [
  '<rootDir>/test/e2e/delivery/mariadb-row-locks.e2e-spec.ts',
  '<rootDir>/test/e2e/delivery/stored-times-and-errors.e2e-spec.ts',
  '<rootDir>/test/e2e/transports/brokers.e2e-spec.ts',
];
const phase = process.env.OUTBOX_TEST_PHASE;
if (phase !== undefined && phase !== 'parallel' && phase !== 'serial') {
  throw new Error(`OUTBOX_TEST_PHASE is "${phase}": expected parallel, serial, or nothing`);
}
/** A project's test files in this phase: its own list, narrowed to the serial files or without them. */
function inPhase(project) {
  if (phase === 'serial') return { ...project, testMatch: SERIAL };
  if (phase === 'parallel') {
    const ignored = project.testPathIgnorePatterns ?? ['/node_modules/'];
    return { ...project, testPathIgnorePatterns: [...ignored, ...SERIAL] };
  }
  return project;
}

/** @type {import('jest').Config} */
module.exports = {
  globalSetup: '<rootDir>/test/fixtures/global-setup.ts',
  testTimeout: 60_000,
  verbose: true,
  projects: [
    {
      ...common,
      displayName: 'typeorm-0.3',
      testMatch: ['<rootDir>/test/**/*.spec.ts', '<rootDir>/test/**/*.e2e-spec.ts'],
      globals: { OUTBOX_TYPEORM: '0.3' },
    },
    {
      ...common,
      displayName: 'typeorm-1',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      // Transports do not touch TypeORM: their broker tests run once, in the first project. Nor do the
      // query plans, which are the database's (and fill a million rows), nor the admin page's browser tests.
      testPathIgnorePatterns: [
        '/node_modules/',
        '<rootDir>/test/e2e/transports/brokers.e2e-spec.ts',
        '<rootDir>/test/e2e/transports/redaction.e2e-spec.ts',
        '<rootDir>/test/e2e/delivery/claim-plan.e2e-spec.ts',
        '<rootDir>/test/e2e/ordering/claim-plan.e2e-spec.ts',
        // The page in a browser talks to the API, whose answers on both TypeORM lines admin-api.e2e-spec.ts checks.
        '<rootDir>/test/e2e/admin/admin-browser.e2e-spec.ts',
      ],
      globals: { OUTBOX_TYPEORM: '1' },
      moduleNameMapper: {
        ...common.moduleNameMapper,
        '^typeorm$': '<rootDir>/node_modules/typeorm1',
        '^typeorm/(.*)$': '<rootDir>/node_modules/typeorm1/$1',
      },
    },
  ].map(inPhase),
};
