import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * The one direction of imports in lib/ (docs/internals/architecture.md): each layer imports only from itself and
 * the layers before it in this list, and no file reaches itself through its imports, `import type`
 * included. A new folder must be placed here before it can be imported.
 */
const LAYERS = [
  'outbox.constants.ts',
  'errors',
  'interfaces',
  'utils',
  'decorators',
  'events',
  'transports',
  'wake-up',
  'dialects',
  'schema',
  'ordering',
  'store',
  'publishing',
  'inbox',
  'operations',
  'delivery',
  'observability',
  'admin',
  'outbox.options.ts',
  'outbox.module-definition.ts',
  'outbox.module.ts',
  'testing',
  'index.ts',
];

const lib = resolve(__dirname, '../../lib');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

/** The lib files a file imports or re-exports from, by relative specifier. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+'(\.{1,2}\/[^']+)'/gms)].map((m) => m[1]);
  return specifiers.map((spec) => {
    const base = resolve(dirname(file), spec);
    for (const candidate of [`${base}.ts`, join(base, 'index.ts')]) {
      try {
        if (statSync(candidate).isFile()) return candidate;
      } catch {
        // not this one
      }
    }
    throw new Error(`${relative(lib, file)} imports ${spec}, which is no file of lib/`);
  });
}

const layerOf = (file: string) => relative(lib, file).split(/[\\/]/)[0];
const files = sources(lib);
const graph = new Map(files.map((file) => [file, importsOf(file)]));

describe('imports in lib/', () => {
  it('places every folder and top-level file in a layer', () => {
    expect([...new Set(files.map(layerOf))].filter((layer) => !LAYERS.includes(layer))).toEqual([]);
  });

  it('go from each layer only to itself and the layers below it', () => {
    const upward = [...graph].flatMap(([file, targets]) =>
      targets
        .filter((target) => LAYERS.indexOf(layerOf(target)) > LAYERS.indexOf(layerOf(file)))
        .map((target) => `${relative(lib, file)} -> ${relative(lib, target)}`),
    );
    expect(upward).toEqual([]);
  });

  it('keep delivery off the dialects: the worker reaches the database through the store alone', () => {
    const dialects = join(lib, 'dialects');
    const reached = [...graph]
      .filter(([file]) => layerOf(file) === 'delivery')
      .flatMap(([file, targets]) =>
        targets.filter((t) => t.startsWith(dialects)).map((t) => `${relative(lib, file)} -> ${relative(lib, t)}`),
      );
    expect(reached).toEqual([]);
  });

  it('form no cycle', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const visit = (file: string, path: string[]) => {
      if (state.get(file) === 'done') return;
      if (state.get(file) === 'open') {
        cycles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(lib, f)).join(' -> '));
        return;
      }
      state.set(file, 'open');
      for (const target of graph.get(file)!) visit(target, [...path, file]);
      state.set(file, 'done');
    };
    for (const file of files) visit(file, []);
    expect(cycles).toEqual([]);
  });
});
