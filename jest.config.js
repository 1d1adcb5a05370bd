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
      // query plans, which are the database's (and fill a million rows).
      testPathIgnorePatterns: [
        '/node_modules/',
        '<rootDir>/test/e2e/transports/brokers.e2e-spec.ts',
        '<rootDir>/test/e2e/transports/redaction.e2e-spec.ts',
        '<rootDir>/test/e2e/delivery/claim-plan.e2e-spec.ts',
        '<rootDir>/test/e2e/ordering/claim-plan.e2e-spec.ts',
      ],
      globals: { OUTBOX_TYPEORM: '1' },
      moduleNameMapper: {
        ...common.moduleNameMapper,
        '^typeorm$': '<rootDir>/node_modules/typeorm1',
        '^typeorm/(.*)$': '<rootDir>/node_modules/typeorm1/$1',
      },
    },
  ],
};
