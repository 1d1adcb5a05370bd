/**
 * This package's own `require`, for the optional peers it loads on first use (STYLE rule 11). The one
 * place in lib/ that names `require`: the CommonJS build has it from Node; the ESM build, compiled from this
 * same file, has none, and scripts/build-esm.mjs defines it here alone as `createRequire(import.meta.url)`
 * (failing the build when another module uses `require`). Under Jest, `createRequire` is Jest's own, so
 * these loads go through its module registry and mocks as the test's imports do.
 */
export const packageRequire: NodeJS.Require = require;
