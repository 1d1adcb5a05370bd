#!/usr/bin/env node
// Reads the README's marked blocks for compat/fresh-app/run.sh. The contract with the README:
//   <!-- install: nestjs-11 -->   directly above a ```bash block: the install command(s) for that major
//   <!-- file: src/app.module.ts --> directly above a ```ts block: the complete content of that file
// Snippets are written ESM-style (`.js` on relative imports); the README tells CommonJS users to drop
// that `.js`, and the `cjs` argument applies exactly that rewrite and nothing else.
//
//   node extract.mjs install <README> <label> <tarball>   prints the commands, the package replaced by <tarball>
//   node extract.mjs files <README> <app dir> esm|cjs     writes the files, prints their paths
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, normalize } from 'node:path';

const PACKAGE = 'nestjs-typeorm-outbox';
const MARKER = /^\s*<!--\s*(install|file):\s*(\S+)\s*-->\s*$/;
const FENCE = /^\s*(`{3,}|~{3,})\s*([\w-]*)/;
const LANGUAGES = { install: ['bash', 'sh', 'shell'], file: ['ts', 'typescript'] };

function fail(message) {
  process.stderr.write(`extract: ${message}\n`);
  process.exit(1);
}

/** Every marker outside a fenced block, with the fenced block that follows it. */
function markedBlocks(readmePath) {
  let text;
  try {
    text = readFileSync(readmePath, 'utf8');
  } catch (error) {
    fail(`cannot read ${readmePath}: ${error.message}`);
  }
  const lines = text.split(/\r?\n/);
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = FENCE.exec(lines[i]);
    if (fence) {
      i = closingFence(lines, i, fence[1], readmePath);
      continue;
    }
    const marker = MARKER.exec(lines[i]);
    if (!marker) continue;
    const [, kind, name] = marker;
    const where = `${readmePath}:${i + 1} (<!-- ${kind}: ${name} -->)`;
    let open = i + 1;
    while (open < lines.length && lines[open].trim() === '') open++;
    const opening = open < lines.length ? FENCE.exec(lines[open]) : null;
    if (!opening) {
      const next = open < lines.length ? `line ${open + 1} is "${lines[open].trim().slice(0, 60)}"` : 'the file ends';
      fail(`${where}: expected a fenced \`\`\`${LANGUAGES[kind][0]} block directly below the marker, but ${next}`);
    }
    if (!LANGUAGES[kind].includes(opening[2])) {
      fail(`${where}: the block below is \`\`\`${opening[2] || '(no language)'}; expected \`\`\`${LANGUAGES[kind].join(' or ```')}`);
    }
    const close = closingFence(lines, open, opening[1], readmePath);
    blocks.push({ kind, name, where, body: lines.slice(open + 1, close).join('\n') + '\n' });
    i = close;
  }
  return blocks;
}

function closingFence(lines, open, fence, readmePath) {
  for (let j = open + 1; j < lines.length; j++) {
    const trimmed = lines[j].trim();
    if (trimmed.length >= fence.length && [...trimmed].every((c) => c === fence[0])) return j;
  }
  fail(`${readmePath}:${open + 1}: the fenced block opened here is never closed`);
}

function install(readmePath, label, tarball) {
  const blocks = markedBlocks(readmePath).filter((b) => b.kind === 'install' && b.name === label);
  if (blocks.length === 0) {
    fail(`${readmePath} has no <!-- install: ${label} --> marker above a \`\`\`bash block`);
  }
  // The package as a command argument, with or without a version: `nestjs-typeorm-outbox@^0.1`.
  const argument = new RegExp(`(^|\\s)${PACKAGE}(@\\S*)?(?=\\s|$)`, 'gm');
  let replaced = 0;
  const script = blocks
    .map((b) =>
      b.body.replace(argument, (_, space) => {
        replaced++;
        return `${space}'${tarball}'`;
      }),
    )
    .join('');
  if (replaced === 0) {
    fail(`the <!-- install: ${label} --> block(s) of ${readmePath} never name ${PACKAGE} as a package to install`);
  }
  process.stdout.write(script);
}

/** `./x.js` → `./x` in import/export specifiers, for CommonJS apps; bare and absolute specifiers untouched. */
function dropRelativeJs(source) {
  return source.replace(
    /(\bfrom\s*|\bimport\s*\(?\s*)(['"])(\.{1,2}\/[^'"\n]*?)\.js\2/g,
    (_, lead, quote, path) => `${lead}${quote}${path}${quote}`,
  );
}

function checkModuleSystem(moduleSystem) {
  if (moduleSystem !== 'esm' && moduleSystem !== 'cjs') fail(`module system must be esm or cjs, not "${moduleSystem}"`);
}

function files(readmePath, appDir, moduleSystem) {
  checkModuleSystem(moduleSystem);
  const blocks = markedBlocks(readmePath).filter((b) => b.kind === 'file');
  if (blocks.length === 0) {
    fail(`${readmePath} has no <!-- file: <path> --> marker above a \`\`\`ts block: nothing to paste`);
  }
  const seen = new Map();
  for (const { name, where, body } of blocks) {
    const path = normalize(name);
    if (isAbsolute(path) || path.startsWith('..')) fail(`${where}: the path must be relative to the app folder`);
    if (seen.has(path)) fail(`${where}: ${path} is already given by ${seen.get(path)}`);
    seen.set(path, where);
    mkdirSync(dirname(join(appDir, path)), { recursive: true });
    writeFileSync(join(appDir, path), moduleSystem === 'cjs' ? dropRelativeJs(body) : body);
    process.stdout.write(`${path}\n`);
  }
}

const [command, ...args] = process.argv.slice(2);
if (command === 'install' && args.length === 3) install(...args);
else if (command === 'files' && args.length === 3) files(...args);
else fail('usage: extract.mjs install <README> <label> <tarball> | files <README> <app dir> esm|cjs');
