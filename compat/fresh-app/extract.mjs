#!/usr/bin/env node
// Reads the marked blocks of a documentation page (docs/quick-start.md, docs/testing.md) for
// compat/fresh-app/run.sh. The contract with the pages:
//   <!-- install: nestjs-11 -->   directly above a ```bash block: the install command(s) for that major
//   <!-- file: src/orders/orders.module.ts --> directly above a ```ts block: the complete content of that file
//       (a ```js or ```json block for a file of another kind); `<!-- file: <path> (esm apps) -->` is pasted into
//       ESM apps only, `(cjs apps)` into CommonJS apps only
//   <!-- merge: src/app.module.ts --> directly above a ```ts block: a Nest module to add to the file the CLI
//       generated, as a user does: its import declarations go below the file's own (those it already has
//       are skipped), its `@Module({ imports: [...] })` entries go first in the file's `imports`; everything
//       else the CLI wrote stays. A comment line starting with `// …` stands for what the CLI generated and is
//       not pasted. The block may hold nothing else: what the merge could not place fails the check.
//   <!-- prepend: src/main.ts --> directly above a ```ts block: lines to put at the top of a file the CLI
//       generated (an import that must run first), above everything it holds
// docs/quick-start.md installs the package (its install blocks must name it); another page's install block
// (docs/observability.md's `tracing`) adds what that page needs to the app the quick start made.
// Snippets are written ESM-style (`.js` on relative imports); the quick start tells CommonJS users to
// drop that `.js`, and the `cjs` argument applies exactly that rewrite and nothing else.
//
//   node extract.mjs install <page> <label> <tarball>   prints the commands, the package replaced by <tarball>
//   node extract.mjs files <page> <app dir> esm|cjs     writes the page's files, prints their paths
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, normalize } from 'node:path';

const PACKAGE = 'nestjs-typeorm-outbox';
const MARKER = /^\s*<!--\s*(install|file|merge|prepend):\s*(\S+)(?:\s+\((esm|cjs) apps\))?\s*-->\s*$/;
const FENCE = /^\s*(`{3,}|~{3,})\s*([\w-]*)/;
const TS = ['ts', 'typescript'];
const LANGUAGES = { install: ['bash', 'sh', 'shell'], file: [...TS, 'js', 'json'], merge: TS, prepend: TS };

function fail(message) {
  process.stderr.write(`extract: ${message}\n`);
  process.exit(1);
}

/** Every marker outside a fenced block, with the fenced block that follows it. */
function markedBlocks(pagePath) {
  let text;
  try {
    text = readFileSync(pagePath, 'utf8');
  } catch (error) {
    fail(`cannot read ${pagePath}: ${error.message}`);
  }
  const lines = text.split(/\r?\n/);
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = FENCE.exec(lines[i]);
    if (fence) {
      i = closingFence(lines, i, fence[1], pagePath);
      continue;
    }
    const marker = MARKER.exec(lines[i]);
    if (!marker) continue;
    const [, kind, name, only] = marker;
    const where = `${pagePath}:${i + 1} (<!-- ${kind}: ${name} -->)`;
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
    const close = closingFence(lines, open, opening[1], pagePath);
    blocks.push({ kind, name, only, where, body: lines.slice(open + 1, close).join('\n') + '\n' });
    i = close;
  }
  return blocks;
}

function closingFence(lines, open, fence, pagePath) {
  for (let j = open + 1; j < lines.length; j++) {
    const trimmed = lines[j].trim();
    if (trimmed.length >= fence.length && [...trimmed].every((c) => c === fence[0])) return j;
  }
  fail(`${pagePath}:${open + 1}: the fenced block opened here is never closed`);
}

function install(pagePath, label, tarball) {
  const blocks = markedBlocks(pagePath).filter((b) => b.kind === 'install' && b.name === label);
  if (blocks.length === 0) {
    fail(`${pagePath} has no <!-- install: ${label} --> marker above a \`\`\`bash block`);
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
  if (replaced === 0 && label.startsWith('nestjs-')) {
    fail(`the <!-- install: ${label} --> block(s) of ${pagePath} never name ${PACKAGE} as a package to install`);
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

/** The index of the bracket that closes the one at `open`, past strings and comments. */
function closingBracket(source, open, where) {
  const pairs = { '(': ')', '[': ']', '{': '}' };
  const stack = [];
  for (let i = open; i < source.length; i++) {
    const c = source[i];
    if (c === '/' && (source[i + 1] === '/' || source[i + 1] === '*')) {
      const close = source[i + 1] === '/' ? '\n' : '*/';
      const end = source.indexOf(close, i + 2);
      i = end === -1 ? source.length : end + close.length - 1;
    } else if (c === "'" || c === '"' || c === '`') {
      for (i++; i < source.length && source[i] !== c; i++) if (source[i] === '\\') i++;
    } else if (pairs[c]) stack.push(pairs[c]);
    else if (c === ')' || c === ']' || c === '}') {
      if (stack.pop() !== c) break;
      if (stack.length === 0) return i;
    }
  }
  fail(`${where}: unbalanced brackets from offset ${open}`);
}

/** The import declarations at the top of a module, each as written, and where the last one ends. */
function importDeclarations(source) {
  const declarations = [];
  let end = 0;
  const declaration = /^import\b[^;]*;[ \t]*\n?/gm;
  for (let match; (match = declaration.exec(source)); ) {
    if (source.slice(end, match.index).replace(/^\s*\/\/.*$/gm, '').trim() !== '') break;
    declarations.push(match[0].trim());
    end = match.index + match[0].length;
  }
  return { declarations, end };
}

/** The `imports: [...]` array of the `@Module({...})` of `source`: where its brackets are. */
function moduleImportsArray(source, where) {
  const decorator = source.indexOf('@Module(');
  if (decorator === -1) fail(`${where}: no @Module( in it`);
  const metadataOpen = source.indexOf('{', decorator);
  const metadataClose = closingBracket(source, metadataOpen, where);
  const imports = /\bimports\s*:\s*\[/g;
  imports.lastIndex = metadataOpen;
  const match = imports.exec(source);
  if (!match || match.index > metadataClose) return { metadataOpen, metadataClose };
  const open = match.index + match[0].length - 1;
  return { metadataOpen, metadataClose, open, close: closingBracket(source, open, where) };
}

const sameCode = (a, b) => a.replace(/\s+/g, ' ') === b.replace(/\s+/g, ' ');

/** Adds a page's module block to the module the CLI generated (see the contract at the top). */
function mergeModule(generated, block, where) {
  const snippet = block.replace(/^[ \t]*\/\/ ….*\n/gm, '');
  const { declarations, end: snippetImportsEnd } = importDeclarations(snippet);
  const entries = moduleImportsArray(snippet, where);
  if (entries.open === undefined) fail(`${where}: its @Module({...}) has no imports: [...] to add`);
  const rest = (snippet.slice(snippetImportsEnd, entries.open + 1) + snippet.slice(entries.close)).trim();
  if (!/^@Module\(\{\s*imports:\s*\[\],?\s*\}\)\s*export class \w+ \{\}$/.test(rest.replace(/\s+/g, ' '))) {
    fail(`${where}: besides import declarations and @Module({ imports: [...] }), it holds what a merge cannot place:\n${rest}`);
  }
  const added = snippet.slice(entries.open + 1, entries.close);

  const target = moduleImportsArray(generated, `the generated file for ${where}`);
  let merged;
  if (target.open === undefined) {
    merged =
      generated.slice(0, target.metadataOpen + 1) +
      `\n  imports: [${added}],` +
      generated.slice(target.metadataOpen + 1);
  } else if (generated.slice(target.open + 1, target.close).trim() === '') {
    merged = generated.slice(0, target.open + 1) + added + generated.slice(target.close);
  } else {
    merged = generated.slice(0, target.open + 1) + added.trimEnd() + generated.slice(target.open + 1);
  }

  const own = importDeclarations(merged);
  const missing = declarations.filter((d) => !own.declarations.some((o) => sameCode(o, d)));
  return merged.slice(0, own.end) + missing.map((d) => `${d}\n`).join('') + merged.slice(own.end);
}

function files(pagePath, appDir, moduleSystem) {
  checkModuleSystem(moduleSystem);
  const blocks = markedBlocks(pagePath).filter((b) => b.kind !== 'install' && (b.only ?? moduleSystem) === moduleSystem);
  if (blocks.length === 0) {
    fail(`${pagePath} has no <!-- file: <path> --> marker above a \`\`\`ts block: nothing to paste`);
  }
  const seen = new Map();
  for (const { kind, name, where, body } of blocks) {
    const path = normalize(name);
    if (isAbsolute(path) || path.startsWith('..')) fail(`${where}: the path must be relative to the app folder`);
    if (seen.has(path)) fail(`${where}: ${path} is already given by ${seen.get(path)}`);
    seen.set(path, where);
    const file = join(appDir, path);
    const source = moduleSystem === 'cjs' ? dropRelativeJs(body) : body;
    if (kind === 'merge' || kind === 'prepend') {
      if (!existsSync(file)) fail(`${where}: the app has no ${path} to add the block to`);
      const generated = readFileSync(file, 'utf8');
      writeFileSync(file, kind === 'merge' ? mergeModule(generated, source, where) : source + generated);
    } else {
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, source);
    }
    process.stdout.write(`${path}\n`);
  }
}

const [command, ...args] = process.argv.slice(2);
if (command === 'install' && args.length === 3) install(...args);
else if (command === 'files' && args.length === 3) files(...args);
else fail('usage: extract.mjs install <page> <label> <tarball> | files <page> <app dir> esm|cjs');
