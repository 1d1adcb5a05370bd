import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package as npm would publish it: `npm pack` of the real dist/, unpacked into a consumer folder that
 * holds nothing but the package and links to the root's copies of its required peers, so what works there
 * works for a user who installed it from the registry.
 */
const root = join(__dirname, '..', '..');
const name = 'nestjs-typeorm-outbox';

interface PackedFile {
  path: string;
}

/** One package of `npm pack --json`: the tarball and what it holds. */
interface Pack {
  filename: string;
  files: PackedFile[];
}

/** The parts of package.json that say which peers a consumer installs. */
interface Manifest {
  peerDependencies: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/** The fields of a source map that name its sources. */
interface SourceMap {
  sourceRoot?: string;
  sources: string[];
}

/** What the consumer scripts below print: where the package resolved from, and the types of two exports. */
interface Resolution {
  from: string;
  types: string[];
}

function run(command: string, args: string[], cwd: string): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8' });
  if (result.error) throw result.error;
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

function succeed(command: string, args: string[], cwd: string): string {
  const result = run(command, args, cwd);
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited with ${result.status}:\n${result.stdout}\n${result.stderr}`);
  }
  return result.stdout;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).map((file) => join(dir, file));
}

/** CI builds first; a developer who edited lib/ (or deleted a file in it) since the last build gets one here. */
function buildIfStale(): void {
  const dist = join(root, 'dist');
  const lib = join(root, 'lib');
  const modified = (file: string) => statSync(file).mtimeMs;
  const built = existsSync(join(dist, 'index.js')) ? Math.min(...filesUnder(dist).map(modified)) : 0;
  const edited = Math.max(...[lib, ...filesUnder(lib)].map(modified));
  if (edited > built) succeed('npm', ['run', 'build'], root);
}

/** The peers a consumer must install (docs/quick-start.md, Install), plus Node's types, which the shipped declarations use. */
function requiredPeers(): string[] {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Manifest;
  const optional = manifest.peerDependenciesMeta ?? {};
  return [...Object.keys(manifest.peerDependencies).filter((peer) => !optional[peer]?.optional), '@types/node'];
}

const consumerSource = `import { OutboxModule, OutboxService, type OutboxMessage } from '${name}';

export const outbox = OutboxModule.forRoot({ worker: { batchSize: 10 } });

export async function placeOrder(service: OutboxService, orderId: string): Promise<void> {
  await service.publish('order.placed', { orderId }, { key: orderId });
}

export function describeMessage(message: OutboxMessage<{ orderId: string }>): string {
  return \`\${message.topic} \${message.payload.orderId}, attempt \${message.attempt}\`;
}
`;

// skipLibCheck off: our shipped declarations and the peer ones they reach, checked as a consumer's tsc sees them.
const strictChecks = {
  strict: true,
  noEmit: true,
  skipLibCheck: false,
  target: 'ES2022',
  lib: ['ES2022'],
  types: ['node'],
};

describe('the packed package', () => {
  let work: string;
  let consumer: string;
  let installed: string;
  let packed: Set<string>;

  beforeAll(() => {
    buildIfStale();
    work = mkdtempSync(join(tmpdir(), 'outbox-package-'));
    const [pack] = JSON.parse(succeed('npm', ['pack', '--json', '--pack-destination', work], root)) as Pack[];
    packed = new Set(pack.files.map((file) => file.path));

    consumer = join(work, 'consumer');
    const modules = join(consumer, 'node_modules');
    mkdirSync(modules, { recursive: true });
    succeed('tar', ['-xzf', join(work, pack.filename), '-C', modules], root);
    installed = join(modules, name);
    renameSync(join(modules, 'package'), installed);
    for (const peer of requiredPeers()) {
      mkdirSync(dirname(join(modules, peer)), { recursive: true });
      symlinkSync(join(root, 'node_modules', peer), join(modules, peer), 'dir');
    }
    writeFileSync(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  }, 120_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('holds the entry points, the licence, the readme and the manifest', () => {
    const esm = ['dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/esm/package.json'];
    for (const file of ['dist/index.js', 'dist/index.d.ts', ...esm, 'LICENSE', 'README.md', 'package.json']) {
      expect(packed).toContain(file);
    }
  });

  it('holds no tests, benchmarks, sample, compat suites, maintainers’ docs, dependencies or build state', () => {
    const unwanted = [...packed].filter(
      (file) =>
        /^(test|bench|sample|compat)\//.test(file) ||
        // Of docs/, the user pages alone: nothing below it (docs/internals/ is the maintainers').
        (/^docs\//.test(file) && !/^docs\/[^/]+\.md$/.test(file)) ||
        /(^|\/)node_modules\//.test(file) ||
        /[.-](spec|test)\.[^/]*$/.test(file) ||
        file.endsWith('.tsbuildinfo'),
    );
    expect(unwanted).toEqual([]);
  });

  it('holds every user page of docs/, so that the README’s links and the errors’ "see docs/…" resolve in node_modules', () => {
    const pages = readdirSync(join(root, 'docs'))
      .filter((file) => file.endsWith('.md'))
      .map((file) => `docs/${file}`);
    expect(pages).toEqual(expect.arrayContaining(['docs/README.md', 'docs/quick-start.md', 'docs/upgrading.md']));
    expect([...packed].filter((file) => file.startsWith('docs/')).sort()).toEqual(pages.sort());
    // A link from a packed page to a page of docs/ (not its internals) names a packed file.
    const missing: string[] = [];
    for (const page of ['README.md', ...pages]) {
      const text = readFileSync(join(installed, page), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+\.md)(?:#[^)\s]*)?\)/g)) {
        const file = posix.normalize(posix.join(posix.dirname(page), target));
        if (/^docs\/[^/]+\.md$/.test(file) && !packed.has(file)) missing.push(`${page} -> ${file}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('ships the source every source map names', () => {
    const maps = [...packed].filter((file) => file.endsWith('.map'));
    expect(maps).toContain('dist/index.js.map');
    const missing: string[] = [];
    for (const map of maps) {
      const { sourceRoot = '', sources } = JSON.parse(readFileSync(join(installed, map), 'utf8')) as SourceMap;
      for (const source of sources) {
        const file = posix.normalize(posix.join(posix.dirname(map), sourceRoot, source));
        if (!packed.has(file)) missing.push(`${map} -> ${file}`);
      }
    }
    // A map whose lib/ file is gone comes from a file deleted since the last build: rm -rf dist && npm run build.
    expect(missing).toEqual([]);
  });

  it('names shipped lib/ files in a stack trace under --enable-source-maps', () => {
    const script =
      `try { require('${name}').OutboxModule.forRoot({ worker: { batchSize: 0 } }); }\n` +
      `catch (error) { console.log(error.stack); }`;
    const stack = succeed(process.execPath, ['--enable-source-maps', '-e', script], consumer);
    const frames = [...stack.matchAll(/\((\/[^()]*):\d+:\d+\)/g)]
      .map(([, file]) => relative(realpathSync(installed), file))
      .filter((file) => !file.startsWith('..'));
    expect(frames).not.toEqual([]);
    for (const file of frames) {
      expect(file).toMatch(/^lib\/.*\.ts$/);
      expect(existsSync(join(installed, file))).toBe(true);
    }
  });

  it.each([
    [
      'node16',
      { module: 'node16', moduleResolution: 'node16' },
      { 'esm.mts': consumerSource, 'cjs.cts': consumerSource },
    ],
    ['bundler', { module: 'esnext', moduleResolution: 'bundler' }, { 'consumer.ts': consumerSource }],
  ])('type-checks in a consumer with module resolution %s', (label, resolution, sources) => {
    const folder = join(consumer, label);
    mkdirSync(folder);
    for (const [file, text] of Object.entries(sources)) writeFileSync(join(folder, file), text);
    const config = { compilerOptions: { ...strictChecks, ...resolution }, files: Object.keys(sources) };
    writeFileSync(join(folder, 'tsconfig.json'), JSON.stringify(config));
    const tscBin = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const tsc = run(process.execPath, [tscBin, '-p', folder, '--pretty', 'false'], consumer);
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  });

  it('gives an ES module consumer the ESM build and its named exports', () => {
    const script =
      `import { OutboxModule, OutboxService } from '${name}';\n` +
      `const types = [typeof OutboxModule, typeof OutboxService];\n` +
      `console.log(JSON.stringify({ from: import.meta.resolve('${name}'), types }));`;
    const { from, types } = JSON.parse(
      succeed(process.execPath, ['--input-type=module', '-e', script], consumer),
    ) as Resolution;
    expect(realpathSync(fileURLToPath(from))).toBe(join(realpathSync(installed), 'dist', 'esm', 'index.js'));
    expect(types).toEqual(['function', 'function']);
  });

  it('gives a CommonJS consumer the CommonJS build and its exports through require', () => {
    const script =
      `const outbox = require('${name}');\n` +
      `const types = [typeof outbox.OutboxModule, typeof outbox.OutboxService];\n` +
      `console.log(JSON.stringify({ from: require.resolve('${name}'), types }));`;
    const { from, types } = JSON.parse(succeed(process.execPath, ['-e', script], consumer)) as Resolution;
    expect(realpathSync(from)).toBe(join(realpathSync(installed), 'dist', 'index.js'));
    expect(types).toEqual(['function', 'function']);
  });
});
