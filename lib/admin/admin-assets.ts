import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { packageRequire } from '../utils/package-require';

/** The page's files, served from memory: read once, on first use. */
export interface AdminAsset {
  type: string;
  body: string;
}

const TYPES: Record<string, string> = {
  'admin.js': 'text/javascript; charset=utf-8',
  'admin.css': 'text/css; charset=utf-8',
};

let folder: string | undefined;
const cache = new Map<string, string>();

function read(file: string): string {
  let text = cache.get(file);
  if (text === undefined) {
    // Beside this module's folder in every build (lib/, dist/, dist/esm/): npm run build copies the page there.
    folder ??= dirname(packageRequire.resolve('../admin/page/admin.js'));
    text = readFileSync(join(folder, file), 'utf8');
    cache.set(file, text);
  }
  return text;
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The page, with the base path it is mounted on (as the client sees it) written in. */
export function adminPage(base: string): string {
  return read('index.html').replaceAll('%BASE%', escapeHtml(base));
}

/** A script or style of the page, or undefined for any other name. */
export function adminAsset(name: string): AdminAsset | undefined {
  const type = TYPES[name];
  return type === undefined ? undefined : { type, body: read(name) };
}
