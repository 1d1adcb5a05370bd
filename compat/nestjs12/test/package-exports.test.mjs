// Which build each kind of import gets: `import` the ESM one (dist/esm/), so that on NestJS 12 the package
// imports @nestjs/* as the ES modules they are, not through require(esm), and so that Jest's ESM mode, whose
// require cannot load ESM on Node before 24.9, can load it; `require` the CommonJS one (dist/), as before.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, it } from 'node:test';
import 'reflect-metadata';
import * as fromImport from 'nestjs-typeorm-outbox';

const require = createRequire(import.meta.url);
const packageDir = new URL('../node_modules/nestjs-typeorm-outbox/', import.meta.url);

describe('the package exports', () => {
  it('gives import the ESM build, marked as ESM', () => {
    assert.equal(import.meta.resolve('nestjs-typeorm-outbox'), new URL('dist/esm/index.js', packageDir).href);
    assert.deepEqual(JSON.parse(readFileSync(new URL('dist/esm/package.json', packageDir), 'utf8')), { type: 'module' });
  });

  it('gives require the CommonJS build, with the same names', () => {
    assert.equal(require.resolve('nestjs-typeorm-outbox'), new URL('dist/index.js', packageDir).pathname);
    const fromRequire = require('nestjs-typeorm-outbox');
    assert.deepEqual(Object.keys(fromImport).sort(), Object.keys(fromRequire).filter((k) => k !== '__esModule').sort());
  });

  it('keeps the decorator metadata Nest injects by, in the ESM build as in the CommonJS one', () => {
    const fromRequire = require('nestjs-typeorm-outbox');
    for (const name of ['OutboxService', 'OutboxWorker', 'OutboxOperations', 'OutboxHealthIndicator']) {
      const types = Reflect.getMetadata('design:paramtypes', fromImport[name]);
      assert.ok(types?.length > 0, `${name} has no design:paramtypes in the ESM build`);
      assert.equal(types.length, Reflect.getMetadata('design:paramtypes', fromRequire[name]).length, name);
    }
  });
});
