#!/usr/bin/env bash
# The built package on NestJS 12 (ESM-only, Node >= 20.19): packs the root's dist/ as npm would publish it,
# installs the tarball beside this folder's pinned NestJS 12 peers, type-checks types/ (an ES module and a
# CommonJS one importing the package: each must get its own build's declarations), and runs test/*.test.mjs
# with Node's test runner on TypeORM 0.3, then again on TypeORM 1.x. The tests are ES modules: they load the
# package's ESM build (dist/esm/; test/package-exports.test.mjs checks which build each kind of import gets).
# Expects `npm run build` done at the root, and PostgreSQL, MariaDB and Redis up (.ci/run starts them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

if [ ! -f "$root/dist/index.js" ]; then
  echo "compat/nestjs12: $root/dist/index.js is missing: run npm run build at the root first" >&2
  exit 1
fi

# shellcheck source=../registry.sh
. "$here/../registry.sh"
# An npm command that needs the registry, its output printed once it is done (or has failed for good).
from_registry() {
  local rc=0
  registry_retry "$tmp/npm.log" "$@" || rc=$?
  cat "$tmp/npm.log"
  return "$rc"
}

tmp="$(mktemp -d)"
restore_typeorm() {
  if [ -d node_modules/.typeorm-0.3 ]; then
    rm -f node_modules/typeorm
    mv node_modules/.typeorm-0.3 node_modules/typeorm
  fi
}
trap 'restore_typeorm; rm -rf "$tmp"' EXIT

tarball="$tmp/$(cd "$root" && npm pack --silent --pack-destination "$tmp")"

# better-sqlite3 is the one install script here, and compiling it takes two minutes on this machine:
# when the root holds the same version and its addon loads in this Node, that addon is taken instead.
version_of() { node -p "JSON.parse(require('fs').readFileSync('$1/package.json', 'utf8')).version"; }
from_registry npm ci --ignore-scripts --no-audit --no-fund
addon=build/Release/better_sqlite3.node
if [ -f "$root/node_modules/better-sqlite3/$addon" ] &&
  [ "$(version_of "$root/node_modules/better-sqlite3")" = "$(version_of node_modules/better-sqlite3)" ] &&
  mkdir -p node_modules/better-sqlite3/build/Release &&
  cp "$root/node_modules/better-sqlite3/$addon" "node_modules/better-sqlite3/$addon" &&
  node -e "require('better-sqlite3')(':memory:').close()"; then
  echo "compat/nestjs12: better-sqlite3 addon taken from the root's node_modules"
else
  npm rebuild better-sqlite3
fi
from_registry npm install --no-save --no-audit --no-fund "$tarball"

# The declarations each resolution gets (TypeScript's nodenext, as a NestJS 12 app compiles), with the root's
# TypeScript: types/esm.mts must be given dist/esm/index.d.ts (ESM declarations), types/cjs.cts dist/index.d.ts.
echo "compat/nestjs12: types: import and require each get their own declarations (tsc $(version_of "$root/node_modules/typescript"))"
if ! node "$root/node_modules/typescript/bin/tsc" -p types --explainFiles >"$tmp/types.log" 2>&1; then
  grep -v '^ ' "$tmp/types.log" | grep -E 'error|types/' >&2 || tail -n 40 "$tmp/types.log" >&2
  echo "compat/nestjs12: FAILED: tsc -p types" >&2
  exit 1
fi
for pair in "esm.mts dist/esm/index.d.ts" "cjs.cts dist/index.d.ts"; do
  read -r from declarations <<<"$pair"
  if ! grep -A1 -x "node_modules/nestjs-typeorm-outbox/$declarations" "$tmp/types.log" | grep -qF "from file 'types/$from'"; then
    grep -A1 -E "^node_modules/nestjs-typeorm-outbox/dist/(esm/)?index\.d\.ts$" "$tmp/types.log" >&2 || true
    echo "compat/nestjs12: FAILED: types/$from does not get $declarations" >&2
    exit 1
  fi
done

run_tests() { # label
  echo "compat/nestjs12: $1, @nestjs/core $(version_of node_modules/@nestjs/core), typeorm $(version_of node_modules/typeorm)"
  node --test test/*.test.mjs
}

run_tests "TypeORM 0.3"
# TypeORM 1.x is pinned as the alias typeorm1; put it where every `require('typeorm')` looks.
mv node_modules/typeorm node_modules/.typeorm-0.3
ln -s typeorm1 node_modules/typeorm
run_tests "TypeORM 1.x"
