#!/usr/bin/env bash
# The newcomer's path, checked: packs the library as npm would publish it, creates a new NestJS app
# with the official CLI in a temp folder, runs the install commands of docs/quick-start.md there (the
# package name replaced by the tarball), pastes the quick start's files (its app.module.ts block added
# to the generated one), then the test of docs/testing.md, type-checks them, runs the app's own e2e
# command, then builds the app and starts it (boot.mjs), on SQLite (better-sqlite3): the two pages as a
# user pastes them, one after the other. Then docs/observability.md's tracing set-up (its install block, its
# files, the import it puts first in main.ts), and the built app started again with the spans printed: a
# request's trace must reach the handler (boot.mjs --trace). Three apps, at once (FRESH_APP_SERIAL=1: in turn):
#   nestjs-11         @nestjs/cli 11, pinned: CommonJS, Jest (`npm run test:e2e`, test/jest-e2e.json); the
#                     pages' snippets get their relative `.js` dropped, as the quick start tells CommonJS users
#   nestjs-12         @nestjs/cli 12, pinned, --no-observe: ESM, Vitest (`npm run test:e2e`,
#                     vitest.config.e2e.ts); snippets as written; the test must have run on the package's ESM
#                     build (dist/esm/). Then the recipe again on Jest, set up by docs/testing.md's
#                     `<!-- install: jest-nestjs-12 -->` commands (they make `npm run test:e2e` run Jest) and its
#                     `<!-- file: … (esm apps) -->` files
#   nestjs-12-latest  the newest @nestjs/cli with its defaults, as a user who runs `nest new` today gets
#                     it (12.0.15 wires @nestjs/observe into app.module.ts and main.ts); the quick start's
#                     nestjs-12 install commands
# The pages' contract (read by extract.mjs): in docs/quick-start.md, `<!-- install: nestjs-11 -->` /
# `<!-- install: nestjs-12 -->` directly above a ```bash block, `<!-- file: <path> -->` directly above a
# ```ts block (a whole file), `<!-- merge: src/app.module.ts -->` directly above a ```ts block (added to
# the generated module); in docs/testing.md, the test: a `<!-- file: test/….ts -->` block (the recipe);
# without one the check fails; and its Jest set-up for NestJS 12 (see nestjs-12 above); in
# docs/observability.md, `<!-- install: tracing -->`, `<!-- file: … -->` and `<!-- prepend: src/main.ts -->`
# (see extract.mjs).
# Expects `npm run build` done at the root. Needs the npm registry; SQLite files only, no servers.
# For working on it: FRESH_APP_DOCS=<folder> reads the quick-start.md and testing.md of another folder
# (default: docs/ at the root), and its observability.md, FRESH_APP_TARBALL=<.tgz> installs that instead of a pack of the root,
# FRESH_APP_ONLY=11|12|latest runs one app, FRESH_APP_KEEP=1 keeps the temp folder.
set -euo pipefail

# The generators, pinned (the CLI takes the schematics package, which holds the templates, as a
# dependency with a caret range: pinned beside it so `nest new` always renders the same app).
NEST11_CLI=@nestjs/cli@11.0.24
NEST11_SCHEMATICS=@nestjs/schematics@11.1.0
NEST12_CLI=@nestjs/cli@12.0.8
NEST12_SCHEMATICS=@nestjs/schematics@12.0.6
# And the newest CLI, unpinned with its schematics, for the app a new user makes today.
NEST_LATEST_CLI=@nestjs/cli@latest
TEST_TIMEOUT_SECONDS=300
# The app that runs the recipe on Jest too, after Vitest: docs/testing.md's commands for NestJS 12.
JEST_APP=nestjs-12
JEST_INSTALL=jest-nestjs-12

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
docs="${FRESH_APP_DOCS:-$root/docs}"
quick_start="$docs/quick-start.md"
testing="$docs/testing.md"
observability="$docs/observability.md"
only="${FRESH_APP_ONLY:-}"

# shellcheck source=../registry.sh
. "$here/../registry.sh"

say() { echo "compat/fresh-app: $*"; }
die() {
  echo "compat/fresh-app: FAILED: $*" >&2
  exit 1
}
# Runs a command with its output in a log; on failure prints the log's end and what failed. A failure of the
# npm registry is tried again (registry_retry): the commands given to it start from scratch each time.
logged() { # log file, what it is (for the message), command...
  local log="$1" what="$2"
  shift 2
  if ! registry_retry "$log" "$@"; then
    echo "----- last lines of the output of: $what" >&2
    tail -n 60 "$log" >&2
    echo "-----" >&2
    die "$what"
  fi
}

[ -n "${FRESH_APP_TARBALL:-}" ] || [ -f "$root/dist/index.js" ] ||
  die "$root/dist/index.js is missing: run npm run build at the root first"
[ -z "${FRESH_APP_README:-}" ] ||
  die "FRESH_APP_README is no longer read: the snippets live in docs/ now; FRESH_APP_DOCS=<folder> reads the" \
    "quick-start.md and testing.md of another folder"
[ -f "$quick_start" ] || die "no quick start at $quick_start"
[ -f "$testing" ] || die "no testing page at $testing"
[ -f "$observability" ] || die "no observability page at $observability"

tmp="$(mktemp -d)"
if [ "${FRESH_APP_KEEP:-}" = 1 ]; then
  trap 'say "kept $tmp"' EXIT
else
  trap 'rm -rf "$tmp"' EXIT
fi

if [ -n "${FRESH_APP_TARBALL:-}" ]; then
  [ -f "$FRESH_APP_TARBALL" ] || die "FRESH_APP_TARBALL=$FRESH_APP_TARBALL is not a file"
  tarball="$tmp/$(basename "$FRESH_APP_TARBALL")"
  cp "$FRESH_APP_TARBALL" "$tarball"
  say "using the tarball $FRESH_APP_TARBALL (FRESH_APP_TARBALL), not a pack of the root"
else
  say "packing the library"
  tarball="$tmp/$(cd "$root" && npm pack --silent --pack-destination "$tmp")"
  [ -f "$tarball" ] || die "npm pack did not leave a tarball in $tmp"
  say "packed $(basename "$tarball")"
fi

# better-sqlite3 compiles its addon from source in its install script (about two minutes per app on
# this machine: the prebuilt binaries are downloaded from GitHub, which is not reachable here). When
# the root's addon loads in this Node, it is offered to that install script as a local prebuilt
# (prebuild-install's `local-prebuilds`, set in a .prebuild-installrc above the apps): npm still
# decides whether the script runs (allowScripts), the script still runs and installs a binary, as it
# would after a download on a user's machine; only the compile is skipped. A different version of
# better-sqlite3 in the app finds no matching file and compiles.
sqlite_root="$root/node_modules/better-sqlite3"
addon=build/Release/better_sqlite3.node
if [ -f "$sqlite_root/$addon" ] &&
  (cd "$root" && node -e "require('better-sqlite3')(':memory:').close()") 2>/dev/null; then
  prebuilt="$(cd "$root" && node -p "const v = require('better-sqlite3/package.json').version;
    const libc = process.platform === 'linux' && !process.report.getReport().header.glibcVersionRuntime ? 'musl' : '';
    \`better-sqlite3-v\${v}-node-v\${process.versions.modules}-\${process.platform}\${libc}-\${process.arch}.tar.gz\`")"
  mkdir -p "$tmp/prebuilds" "$tmp/prebuilt-stage/build/Release"
  cp "$sqlite_root/$addon" "$tmp/prebuilt-stage/$addon"
  tar -C "$tmp/prebuilt-stage" -czf "$tmp/prebuilds/$prebuilt" build
  echo "local-prebuilds=$tmp/prebuilds" >"$tmp/.prebuild-installrc"
  say "better-sqlite3: the root's addon is offered to the apps' install script as $prebuilt"
else
  say "better-sqlite3: no usable addon at the root; the apps compile their own (about 2 minutes each)"
fi

check_app() { # label, app dir, cjs|esm
  local label="$1" app="$2" modules="$3" type
  type="$(node -p "require('$app/package.json').type || 'commonjs'")"
  if [ "$modules" = esm ] && [ "$type" != module ]; then
    die "$label: nest new made a package.json with type \"$type\", expected an ESM app (\"type\": \"module\")"
  fi
  if [ "$modules" = cjs ] && [ "$type" = module ]; then
    die "$label: nest new made an ESM app, expected CommonJS"
  fi
  [ -n "$(node -p "require('$app/package.json').scripts?.['test:e2e'] ?? ''")" ] ||
    die "$label: the generated package.json has no test:e2e script"
}

# Runs the app's `npm run test:e2e`, then checks that each of the testing page's tests ran: a line of its output
# (without colours) that matches <before> and the test's path.
run_e2e() { # label, app, log (without .log), runner ('' or 'Jest '), before (a regex), tests...
  local label="$1" app="$2" log="$3" runner="$4" before="$5" file
  shift 5
  logged "$log.log" "$label: npm run test:e2e ${runner:+on $runner}(failed, or ran past $TEST_TIMEOUT_SECONDS s)" \
    bash -c 'cd "$1" && timeout "$2" npm run test:e2e' _ "$app" "$TEST_TIMEOUT_SECONDS"
  sed 's/\x1b\[[0-9;]*m//g' "$log.log" >"$log.txt"
  for file in "$@"; do
    grep -qE "$before${file//./\\.}" "$log.txt" || {
      tail -n 40 "$log.txt" >&2
      die "$label: npm run test:e2e ${runner:+on $runner}passed without running $file (does the runner's e2e pattern match it?)"
    }
  done
  grep -E '^ *Tests[: ]' "$log.txt" | sed -E "s/^ *Tests:? +/compat\/fresh-app: $label: ${runner}tests: /" || true
}

run_app() { # label, install block (nestjs-11|nestjs-12), cli, schematics (or ''), cjs|esm, extra `nest new` options...
  local label="$1" install="$2" cli="$3" schematics="$4" modules="$5"
  shift 5
  local generator=(-p "$cli")
  [ -z "$schematics" ] || generator+=(-p "$schematics")
  local work="$tmp/$label" started=$SECONDS
  local app="$work/app" logs="$work/logs"
  mkdir -p "$work" "$logs"

  say "$label: nest new with $cli (${schematics:-its own schematics}) $*"
  # stdin is not a terminal: the CLI asks nothing and takes each default (for 12.0.15: ESM, and
  # @nestjs/observe unless told --no-observe, as the pinned app is).
  logged "$logs/nest-new.log" "$label: npx $cli new app" \
    bash -c 'cd "$1" && rm -rf app && shift && npx -y "$@" </dev/null' _ "$work" "${generator[@]}" \
    nest new app --skip-git --skip-install --package-manager npm --language ts "$@"
  [ -f "$app/package.json" ] || die "$label: nest new made no app/package.json (see above)"
  check_app "$label" "$app" "$modules"
  say "$label: made by @nestjs/cli $(npx -y "${generator[@]}" nest --version </dev/null 2>/dev/null || echo '(version unknown)'), \
with$(grep -q '"@nestjs/observe"' "$app/package.json" || echo out) @nestjs/observe"

  say "$label: npm install (what nest new runs unless told to skip it)"
  logged "$logs/npm-install.log" "$label: npm install of the new app" bash -c 'cd "$1" && npm install' _ "$app"

  say "$label: the quick start's <!-- install: $install --> commands, $(basename "$tarball") for nestjs-typeorm-outbox"
  (cd "$here" && node extract.mjs install "$quick_start" "$install" "$tarball") >"$work/install.sh" ||
    die "$label: could not read the install commands from $quick_start (see above)"
  sed 's/^/    /' "$work/install.sh"
  logged "$logs/install.log" "$label: the quick start's install commands (the log shows each as + …)" \
    bash -c 'cd "$1" && bash -euxo pipefail "$2"' _ "$app" "$work/install.sh"
  if [ ! -d "$app/node_modules/better-sqlite3" ]; then
    die "$label: better-sqlite3 is not installed after the quick start's install commands (its app uses it)"
  fi
  if [ ! -f "$app/node_modules/better-sqlite3/$addon" ] ||
    ! (cd "$app" && node -e "require('better-sqlite3')(':memory:').close()") >"$logs/addon.log" 2>&1; then
    tail -n 20 "$logs/install.log" >&2
    die "$label: better-sqlite3 has no working addon after the quick start's install commands: its install script" \
      "did not run or failed (npm runs it only for packages in package.json \"allowScripts\"; see the npm" \
      "\"install-scripts\" notice above)"
  fi
  # npm 11 runs an install script that allowScripts does not cover, with a warning; npm 12 skips it, and
  # better-sqlite3 then has no addon ("Could not locate the bindings file"). So the quick start's commands
  # must approve it themselves; `npm install-scripts ls` tells. Reported after the tests, which still run.
  local pending allow_scripts_problem=
  if pending="$(cd "$app" && npm install-scripts ls 2>&1)"; then
    if grep -q 'better-sqlite3' <<<"$pending"; then
      echo "$pending" | sed 's/^/    /'
      allow_scripts_problem="after the quick start's install commands, better-sqlite3's install script is not covered by \
package.json \"allowScripts\": npm 11 runs it with a warning, npm 12 skips it and the app has no SQLite addon. \
The quick start's install block must approve it, e.g. \`npm pkg set allowScripts.better-sqlite3=true --json\` before \
\`npm install\`"
      say "$label: problem (reported at the end of this app): $allow_scripts_problem"
    fi
  else
    say "$label: this npm has no \`npm install-scripts ls\`: the allowScripts check is skipped"
  fi
  if [ -n "${prebuilt:-}" ] && cmp -s "$app/node_modules/better-sqlite3/$addon" "$sqlite_root/$addon"; then
    say "$label: better-sqlite3's install script ran and took the root's addon"
  else
    say "$label: better-sqlite3's install script ran and built its addon"
  fi

  say "$label: pasting the quick start's <!-- file: … --> blocks, adding its <!-- merge: … --> ones ($modules)"
  (cd "$here" && node extract.mjs files "$quick_start" "$app" "$modules") >"$work/files.txt" ||
    die "$label: could not paste the quick start from $quick_start (see above)"
  say "$label: pasted $(paste -sd ' ' "$work/files.txt")"
  say "$label: pasting the testing page's <!-- file: … --> blocks ($modules)"
  (cd "$here" && node extract.mjs files "$testing" "$app" "$modules") >"$work/test-files.txt" ||
    die "$label: could not paste the testing recipe from $testing (see above)"
  local tests
  tests="$(grep -E '^test/.+\.ts$' "$work/test-files.txt" || true)"
  [ -n "$tests" ] || die "$label: $testing has no <!-- file: test/… --> block (the recipe)"
  say "$label: test: the testing page's $(echo $tests)"

  say "$label: type-check (tsc -p tsconfig.json: src and test)"
  logged "$logs/tsc.log" "$label: tsc --noEmit -p tsconfig.json on the pasted files" \
    bash -c 'cd "$1" && node_modules/.bin/tsc --noEmit -p tsconfig.json' _ "$app"

  say "$label: npm run test:e2e"
  run_e2e "$label" "$app" "$logs/test-e2e" '' '' $tests
  if [ "$modules" = esm ]; then
    # Vitest imports the package as Node does: by the `import` condition of its exports.
    local resolved
    resolved="$(cd "$app" && node --input-type=module -e "console.log(import.meta.resolve('nestjs-typeorm-outbox'))")"
    [[ "$resolved" == */node_modules/nestjs-typeorm-outbox/dist/esm/index.js ]] ||
      die "$label: the app imports nestjs-typeorm-outbox from $resolved, not from its ESM build (dist/esm/index.js)"
    say "$label: the test ran on the package's ESM build (dist/esm/)"
  fi
  if [ "$label" = "$JEST_APP" ]; then
    say "$label: Jest as docs/testing.md sets it up for NestJS 12: its <!-- install: $JEST_INSTALL --> commands"
    (cd "$here" && node extract.mjs install "$testing" "$JEST_INSTALL" "$tarball") >"$work/jest-install.sh" ||
      die "$label: could not read the Jest commands from $testing (see above)"
    sed 's/^/    /' "$work/jest-install.sh"
    logged "$logs/jest-install.log" "$label: the testing page's Jest commands" \
      bash -c 'cd "$1" && bash -euxo pipefail "$2"' _ "$app" "$work/jest-install.sh"
    say "$label: npm run test:e2e, now on Jest"
    run_e2e "$label" "$app" "$logs/test-e2e-jest" 'Jest ' '^PASS +(.*/)?' $tests
  fi

  say "$label: npm run build, then npm run start:prod until GET / answers"
  logged "$logs/build.log" "$label: npm run build" bash -c 'cd "$1" && npm run build' _ "$app"
  logged "$logs/boot.log" "$label: the built app under npm run start:prod" node "$here/boot.mjs" "$app"
  say "$label: $(tail -n 1 "$logs/boot.log")"

  say "$label: tracing as docs/observability.md sets it up: its <!-- install: tracing --> commands, its files"
  (cd "$here" && node extract.mjs install "$observability" tracing "$tarball") >"$work/tracing-install.sh" ||
    die "$label: could not read the tracing install commands from $observability (see above)"
  sed 's/^/    /' "$work/tracing-install.sh"
  logged "$logs/tracing-install.log" "$label: the tracing install commands" \
    bash -c 'cd "$1" && bash -euxo pipefail "$2"' _ "$app" "$work/tracing-install.sh"
  (cd "$here" && node extract.mjs files "$observability" "$app" "$modules") >"$work/tracing-files.txt" ||
    die "$label: could not paste the tracing set-up from $observability (see above)"
  say "$label: pasted $(paste -sd ' ' "$work/tracing-files.txt")"
  logged "$logs/tracing-tsc.log" "$label: tsc --noEmit with the tracing set-up" \
    bash -c 'cd "$1" && node_modules/.bin/tsc --noEmit -p tsconfig.json' _ "$app"
  logged "$logs/tracing-build.log" "$label: npm run build with the tracing set-up" bash -c 'cd "$1" && npm run build' _ "$app"
  logged "$logs/trace.log" "$label: a request's trace through to the handler (boot.mjs --trace)" \
    node "$here/boot.mjs" "$app" --trace
  say "$label: $(tail -n 1 "$logs/trace.log")"
  [ -z "$allow_scripts_problem" ] || die "$label: $allow_scripts_problem"
  say "$label: passed in $((SECONDS - started)) s"
}

# Each app in a subshell of its own (with `set -e` in force: not in an `if`), so that a failure of one
# still lets the others report. The three run at once (most of their time is waiting on the registry and
# on child processes; each has its own folder, logs and free ports), each writing its lines to a file,
# printed in order once all have ended. FRESH_APP_SERIAL=1 runs them one after the other, printing as it goes.
failed=()
labels=()
try_app() { # run_app's arguments
  local rc started=$SECONDS
  set +e
  (
    set -e
    run_app "$@"
  )
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then say "$1: failed after $((SECONDS - started)) s"; fi
  return "$rc"
}
start_app() { # run_app's arguments
  labels+=("$1")
  if [ "${FRESH_APP_SERIAL:-}" = 1 ]; then
    try_app "$@" || failed+=("$1")
    return 0
  fi
  (try_app "$@" >"$tmp/$1.out" 2>&1; echo $? >"$tmp/$1.rc") &
}
if [ -z "$only" ] || [ "$only" = 11 ]; then start_app nestjs-11 nestjs-11 "$NEST11_CLI" "$NEST11_SCHEMATICS" cjs; fi
if [ -z "$only" ] || [ "$only" = 12 ]; then
  start_app nestjs-12 nestjs-12 "$NEST12_CLI" "$NEST12_SCHEMATICS" esm --no-observe
fi
if [ -z "$only" ] || [ "$only" = latest ]; then start_app nestjs-12-latest nestjs-12 "$NEST_LATEST_CLI" '' esm; fi
if [ "${FRESH_APP_SERIAL:-}" != 1 ]; then
  say "${labels[*]}: running at once; their lines follow, app by app, once all have ended"
  wait
  for label in "${labels[@]}"; do
    cat "$tmp/$label.out"
    [ "$(cat "$tmp/$label.rc" 2>/dev/null || echo 1)" = 0 ] || failed+=("$label")
  done
fi
[ "${#failed[@]}" = 0 ] || die "${failed[*]} (see the FAILED lines above)"
say "passed"
