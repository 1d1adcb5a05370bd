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
  return name
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .some((word) => SECRET_WORDS.has(word));
}

/** The user and password of a URL: `amqp://guest:guest@host` → `amqp://[redacted]@host`. */
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@'"]+@/gi;

/**
 * A name, quoted or not (also with escaped quotes, as in JSON within a JSON string), then `:` or `=`,
 * then its value: quoted, or a word (with an auth scheme before it: `Authorization: Bearer …`). Objects
 * and arrays are left to the names inside them.
 */
const NAMED_VALUE =
  /(\\?["']?)([A-Za-z0-9_.-]+)(\\?["']?)(\s*[:=]\s*)(\\"(?:[^"\\]|\\[^"])*\\"|"(?:[^"\\]|\\.)*"|'[^']*'|(?:(?:Bearer|Basic|Digest|Token)\s+)?(?![{[])[^\s,;&?'"\\})\]]+)/g;

/**
 * A text with its secrets replaced: the user and password of every URL, and the value of every field,
 * header or parameter named like a password, secret, token, authorization, API key, cookie or
 * credential (`"password":"…"`, `Authorization: Bearer …`, `?token=…`, `apiKey=…`).
 */
export function redactSecrets(text: string): string {
  return text
    .replace(URL_USERINFO, `$1${REDACTED}@`)
    .replace(NAMED_VALUE, (_match, open: string, name: string, close: string, separator: string, value: string) => {
      // Not a secret: its value may hold one (`failed: token=…`, `"detail":"password=…"`).
      if (!isSecretName(name)) return `${open}${name}${close}${separator}${redactSecrets(value)}`;
      const quote = value.startsWith('\\"') ? '\\"' : value.startsWith('"') ? '"' : value.startsWith("'") ? "'" : '';
      return `${open}${name}${close}${separator}${quote}${REDACTED}${quote}`;
    });
}

/** A `JSON.stringify` replacer that hides the values of fields named like secrets. */
export function hidingSecrets(key: string, value: unknown): unknown {
  return key !== '' && isSecretName(key) && value !== undefined && value !== null ? REDACTED : value;
}
