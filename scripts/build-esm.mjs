#!/usr/bin/env node
// The last step of `npm run build`: makes the tsc output in dist/esm/ (tsconfig.build-esm.json: ES2022 modules,
// the same decorator metadata as the CommonJS build in dist/) loadable by Node's ESM loader and typed as ESM.
//   - Relative specifiers get the file Node needs: `./x` → `./x.js`, `./dir` → `./dir/index.js`, in the .js files and
//     the .d.ts files alike. TypeScript's parser finds them (not a regular expression), and each is resolved
//     against the emitted files: one that matches neither fails the build.
//   - `require`, `__dirname` and `__filename` do not exist in ESM. lib/utils/package-require.ts is the one module
//     allowed to name `require` (for the optional peers): its ESM output gets `createRequire(import.meta.url)`.
//     Any other use of the three fails the build.
//   - dist/esm/package.json says {"type": "module"}, so Node loads these .js files as ESM and TypeScript reads
//     these .d.ts files as ESM declarations (no "masquerading" CommonJS types).
// Usage: node scripts/build-esm.mjs [dir] (default dist/esm)
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(process.argv[2] ?? 'dist/esm');
const REQUIRE_MODULE = 'utils/package-require.js';
const CJS_ONLY = new Set(['require', '__dirname', '__filename']);

function fail(message) {
  process.stderr.write(`build-esm: ${message}\n`);
  process.exit(1);
}

function* files(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (name.endsWith('.js') || name.endsWith('.d.ts')) yield path;
  }
}

/** `./x` as Node's ESM loader needs it, by what tsc emitted beside `file`. */
function explicit(file, specifier) {
  const declaration = file.endsWith('.d.ts');
  const target = resolve(dirname(file), specifier);
  const emitted = (base) => existsSync(declaration ? `${base}.d.ts` : `${base}.js`);
  if (specifier.endsWith('.js') && emitted(target.slice(0, -3))) return specifier;
  if (emitted(target)) return `${specifier}.js`;
  if (emitted(join(target, 'index'))) return `${specifier.replace(/\/$/, '')}/index.js`;
  fail(`${relative(root, file)}: "${specifier}" is neither a file nor a folder with an index in ${relative(process.cwd(), root)}`);
}

/** The string literals of a module's import and export specifiers: declarations, `import()` and `import("x").T`. */
function specifierLiterals(source) {
  const literals = [];
  const visit = (node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      literals.push(node.moduleSpecifier);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      literals.push(node.arguments[0]);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      literals.push(node.argument.literal);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return literals.filter((literal) => literal && ts.isStringLiteral(literal));
}

function rewriteSpecifiers(file, text) {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const relativeOnes = specifierLiterals(source).filter((l) => l.text.startsWith('./') || l.text.startsWith('../'));
  let out = text;
  // From the end, so that the positions of the earlier ones stay right; inside the quotes, which stay as written.
  for (const literal of relativeOnes.sort((a, b) => b.getStart() - a.getStart())) {
    out = out.slice(0, literal.getStart() + 1) + explicit(file, literal.text) + out.slice(literal.getEnd() - 1);
  }
  return out;
}

/** Where the JavaScript names one of the CommonJS-only variables (not as a property: `x.require` is fine). */
function commonJsOnlyUses(file, text) {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const uses = [];
  const visit = (node) => {
    if (ts.isIdentifier(node) && CJS_ONLY.has(node.text)) {
      const parent = node.parent;
      const isPropertyName =
        (ts.isPropertyAccessExpression(parent) && parent.name === node) ||
        ((ts.isPropertyAssignment(parent) || ts.isMethodDeclaration(parent) || ts.isPropertyDeclaration(parent)) &&
          parent.name === node);
      if (!isPropertyName) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        uses.push(`${relative(root, file)}:${line + 1}: ${node.text}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return uses;
}

if (!existsSync(join(root, 'index.js'))) fail(`${root}/index.js is missing: run tsc -p tsconfig.build-esm.json first`);

const misplaced = [];
for (const file of files(root)) {
  let text = rewriteSpecifiers(file, readFileSync(file, 'utf8'));
  if (file.endsWith('.js')) {
    const uses = commonJsOnlyUses(file, text);
    if (relative(root, file).split('\\').join('/') === REQUIRE_MODULE) {
      if (!uses.some((u) => u.endsWith(': require'))) fail(`${REQUIRE_MODULE} no longer names require: update this script`);
      if (!text.includes("from 'node:module'")) {
        // On the first line, which holds a comment: the source map's lines stay right.
        text = "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url); " + text;
      }
    } else {
      misplaced.push(...uses);
    }
  }
  writeFileSync(file, text);
}
if (misplaced.length > 0) {
  fail(
    `these do not exist in ESM; load an optional package through lib/utils/package-require.ts, and find a file ` +
      `from import.meta.url:\n  ${misplaced.join('\n  ')}`,
  );
}
writeFileSync(join(root, 'package.json'), `${JSON.stringify({ type: 'module' }, null, 2)}\n`);
