// npm run build, last step: the admin page's files (lib/admin/page: one HTML page, one script, one
// stylesheet, written to run as they are, with no bundler) copied beside the admin module of each build,
// where it reads them (lib/admin/admin-assets.ts), and their size reported: raw and gzipped.
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'lib/admin/page');
const files = ['index.html', 'admin.js', 'admin.css'];
let raw = 0;
let gzipped = 0;
for (const build of ['dist', 'dist/esm']) {
  const target = join(root, build, 'admin/page');
  mkdirSync(target, { recursive: true });
  for (const file of files) copyFileSync(join(source, file), join(target, file));
}
for (const file of files) {
  const text = readFileSync(join(source, file));
  raw += text.length;
  gzipped += gzipSync(text, { level: 9 }).length;
}
console.log(`admin page: ${files.length} files, ${(raw / 1024).toFixed(1)} KiB (${(gzipped / 1024).toFixed(1)} KiB gzipped)`);
