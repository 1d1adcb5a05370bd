import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

/**
 * The relative links of the README and the pages under docs/ (and of test/README.md): each names a
 * file or folder of the repository and, with a #fragment into a markdown page, one of its headings as
 * GitHub names them. A page moved or a heading renamed without its links fails here, not on a reader.
 */
const root = join(__dirname, '../..');

function pagesUnder(dir: string): string[] {
  return readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.md'))
    .map((file) => join(dir, file));
}

const pages = ['README.md', 'test/README.md', ...pagesUnder('docs')];

/** The page's text without its fenced blocks, whose brackets and hashes are code. */
function prose(page: string): string {
  const kept: string[] = [];
  let fence: string | undefined;
  for (const line of readFileSync(join(root, page), 'utf8').split('\n')) {
    if (fence === undefined) {
      fence = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
      if (fence === undefined) kept.push(line);
    } else {
      // A closing fence: the opening one's character, at least as many, and nothing after it.
      const closing = /^\s*(`{3,}|~{3,})\s*$/.exec(line)?.[1];
      if (closing && closing[0] === fence[0] && closing.length >= fence.length) fence = undefined;
    }
  }
  return kept.join('\n');
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2…. */
function anchorsOf(page: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading] of prose(page).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** Every relative link of the page: `[text](target)`, web and mail addresses left out. */
function linksOf(page: string): string[] {
  return [...prose(page).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)]
    .map(([, target]) => target)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

describe('the links of the README and docs/', () => {
  it('finds the pages', () => {
    expect(pages).toEqual(expect.arrayContaining(['README.md', 'docs/README.md', 'docs/internals/architecture.md']));
  });

  it.each(pages)('%s: every relative link names a file, and every #fragment a heading of it', (page) => {
    const broken: string[] = [];
    for (const link of linksOf(page)) {
      const [path, fragment] = link.split('#', 2);
      const file = path === '' ? join(root, page) : join(root, dirname(page), decodeURI(path));
      const shown = path === '' ? `${link} (this page)` : `${link} (${relative(root, file)})`;
      if (!existsSync(file)) broken.push(`${shown}: no such file`);
      else if (fragment !== undefined && file.endsWith('.md') && !anchorsOf(relative(root, file)).has(fragment)) {
        broken.push(`${shown}: no heading #${fragment}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('keeps the README’s install command the same as the quick start’s', () => {
    const fenced = (page: string) =>
      [...readFileSync(join(root, page), 'utf8').matchAll(/```bash\n([\s\S]*?)```/g)].map(([, body]) => body);
    const readme = fenced('README.md').filter((body) => /npm install nestjs-typeorm-outbox\b/.test(body));
    expect(readme).not.toEqual([]);
    for (const body of readme) expect(fenced('docs/quick-start.md')).toContain(body);
  });
});
