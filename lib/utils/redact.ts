/** What a secret is replaced with. */
export const REDACTED = '[redacted]';

/** Found anywhere in a name, once lowercased and stripped of separators: `db_password`, `x-api-key`, `accessToken`. */
const SECRET_PARTS = [
  'password',
  'passwd',
  'passphrase',
  'secret',
  'token',
  'apikey',
  'authoriz',
  'authoris',
  'cookie',
  'credential',
  'privatekey',
];
/** Whole words of a name that are secrets too: `pass`, `pwd`. */
const SECRET_WORDS = new Set(['pass', 'pwd']);

/** Whether a field, header or parameter of this name holds a secret. */
export function isSecretName(name: string): boolean {
  const lower = name.toLowerCase();
  const joined = lower.replace(/[^a-z0-9]/g, '');
  if (SECRET_PARTS.some((part) => joined.includes(part))) return true;
  // Most names hold neither word: no need to split them.
  if (!joined.includes('pass') && !joined.includes('pwd')) return false;
  return name
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .some((word) => SECRET_WORDS.has(word));
}

/** A URL's scheme and `//`, after which its user and password may come. */
const URL_START = /\b[a-z][a-z0-9+.-]{0,31}:\/\//gi;
/** What ends a URL in a text: a space or a quote. */
const URL_END = /[\s'"`]/g;

/**
 * The user and password of every URL replaced: `amqp://guest:guest@host` → `amqp://[redacted]@host`.
 * They run to the authority's last `@` (a password may hold a raw `@`) or, when a `:` comes before the
 * first `/`, `?` or `#`, to the URL's last `@` (a password may hold those too; a URL with a port and an
 * `@` in its path then loses its host as well). In a cut text, a URL the cut ends is redacted whole:
 * its `@` may be past the cut.
 */
function redactUrlCredentials(text: string, cut: boolean): string {
  const starts = new RegExp(URL_START);
  let out = '';
  let from = 0;
  let runEnd = -1;
  let lastAt = -1;
  for (let match = starts.exec(text); match; match = starts.exec(text)) {
    const at = match.index + match[0].length;
    if (at > runEnd) {
      // A new run of text without spaces or quotes: where it ends and its last `@`, once per run.
      URL_END.lastIndex = at;
      runEnd = URL_END.exec(text)?.index ?? text.length;
      lastAt = runEnd - 1;
      while (lastAt >= at && text[lastAt] !== '@') lastAt--;
    }
    let end: number | undefined;
    if (cut && runEnd === text.length && runEnd > at) end = runEnd;
    else if (lastAt >= at) {
      let hostEnd = at;
      let authorityAt = -1;
      let colon = false;
      for (; hostEnd < runEnd && !'/?#'.includes(text[hostEnd]); hostEnd++) {
        if (text[hostEnd] === '@') authorityAt = hostEnd;
        else if (text[hostEnd] === ':') colon = true;
      }
      end = lastAt >= hostEnd && colon ? lastAt : authorityAt >= 0 ? authorityAt : undefined;
    }
    if (end === undefined) continue;
    out += `${text.slice(from, at)}${REDACTED}`;
    from = end;
    starts.lastIndex = end;
  }
  return out + text.slice(from);
}

/** A name, quoted or not (also with escaped quotes, as in JSON within a JSON string), then `:` or `=`. */
const NAME = /(\\?["']?)([A-Za-z0-9_.-]{1,100})(\\?["']?)\s*[:=]\s*/g;
/**
 * A secret's value, where its name ends: quoted (to the text's end when nothing closes it: a value cut
 * short), an array's `[`, or a word (with an auth scheme before it, in any case: `authorization: bearer
 * …`). An object is left to the names inside it.
 */
const VALUE =
  /\\"(?:[^"\\]|\\[^"])*(\\"|"|\\?$)|"(?:[^"\\]|\\[\s\S])*(?:"|\\?$)|'[^']*(?:'|$)|\[|(?:(?:bearer|basic|digest|token|negotiate|ntlm)\s+)?(?!\{)[^\s,;&?'"\\})\]]+/iy;
/** The rest of a header's line: a cookie header's value, `a=1; session=…`, is all secret. */
const LINE_REST = /[^\r\n"\\]*/y;

/** The value of every field, header or parameter named like a secret replaced. */
function redactNamedValues(text: string): string {
  const names = new RegExp(NAME);
  let out = '';
  let from = 0;
  for (let match = names.exec(text); match; match = names.exec(text)) {
    const [, open, name, close] = match;
    // Not a secret: what follows is read as any text, and may hold one (`failed: token=…`).
    if (!isSecretName(name)) continue;
    const valueAt = names.lastIndex;
    VALUE.lastIndex = valueAt;
    const found = VALUE.exec(text);
    if (!found) continue;
    const [value, escapedEnd] = found;
    let end = VALUE.lastIndex;
    let quote = value.startsWith('\\"') ? '\\"' : value.startsWith('"') ? '"' : value.startsWith("'") ? "'" : '';
    // An escaped value that the text's own closing quote ends: that quote stays.
    const after = escapedEnd === '"' ? '"' : '';
    if (value === '[') {
      quote = close;
      end = arrayEnd(text, valueAt, open === '\\"');
    } else if (!quote && name.toLowerCase().includes('cookie')) {
      LINE_REST.lastIndex = valueAt;
      end = valueAt + LINE_REST.exec(text)![0].length;
    }
    out += `${text.slice(from, valueAt)}${quote}${REDACTED}${quote}${after}`;
    from = end;
    names.lastIndex = end;
  }
  return out + text.slice(from);
}

/**
 * Just past the `]` that closes the array opening at `start`, its strings skipped (`escaped`: within a
 * JSON string, where `\"` is a quote); the text's end when nothing closes it (a cut).
 */
function arrayEnd(text: string, start: number, escaped: boolean): number {
  let depth = 0;
  let quote = '';
  let skip = false;
  for (let i = start; i < text.length; i++) {
    let c = text[i];
    if (escaped && c === '\\' && i + 1 < text.length) c = text[++i];
    if (skip) skip = false;
    else if (quote) {
      if (c === '\\') skip = true;
      else if (c === quote) quote = '';
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '[' || c === '{') depth++;
    else if ((c === ']' || c === '}') && --depth === 0) return i + 1;
  }
  return text.length;
}

/**
 * A text with its secrets replaced: the user and password of every URL, and the value of every field,
 * header or parameter named like a password, secret, token, authorization, API key, cookie or
 * credential (`"password":"…"`, `Authorization: Bearer …`, `?token=…`, `"apiKeys":[…]`, a cookie
 * header's every cookie). `cut`: the text is the start of a longer one, so a URL it ends in is hidden
 * whole (a value it ends in already is).
 */
export function redactSecrets(text: string, { cut = false }: { cut?: boolean } = {}): string {
  return redactNamedValues(redactUrlCredentials(text, cut));
}

/** A `JSON.stringify` replacer that hides the values of fields named like secrets. */
export function hidingSecrets(key: string, value: unknown): unknown {
  return key !== '' && isSecretName(key) && value !== undefined && value !== null ? REDACTED : value;
}
