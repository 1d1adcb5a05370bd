#!/usr/bin/env bash
# The built package on NestJS 12 (ESM-only; loaded through require(esm), Node >= 20.19): packs the
# root's dist/ as npm would publish it, installs the tarball beside this folder's pinned NestJS 12
# peers, and runs test/*.test.mjs with Node's test runner on TypeORM 0.3, then again on TypeORM 1.x.
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

run_tests() { # label
  echo "compat/nestjs12: $1, @nestjs/core $(version_of node_modules/@nestjs/core), typeorm $(version_of node_modules/typeorm)"
  node --test test/*.test.mjs
}

run_tests "TypeORM 0.3"
# TypeORM 1.x is pinned as the alias typeorm1; put it where every `require('typeorm')` looks.
mv node_modules/typeorm node_modules/.typeorm-0.3
ln -s typeorm1 node_modules/typeorm
run_tests "TypeORM 1.x"
