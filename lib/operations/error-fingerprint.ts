import { createHash } from 'node:crypto';

/** The longest signature kept: enough to read, short enough to group by. */
const SIGNATURE_LENGTH = 300;

/**
 * A quoted value. A quote mark opens and closes only at a word's edge, so the apostrophe of "card's"
 * or "don't" is none; a pair is no quote when a sentence ends between its marks, and a quoted sentence
 * ('Your card has expired.') is the failure's wording, not a value. Without these rules an apostrophe
 * and a quote further on erase the words between them, and different failures merge.
 */
const EDGE_BEFORE = String.raw`(?<![\p{L}\p{N}_])`;
const EDGE_AFTER = String.raw`(?![\p{L}\p{N}_])`;
const NO_SENTENCE_END = String.raw`(?![.!?;]\s)`;
const NOT_A_SENTENCE = String.raw`(?<![.!?])`;
/** Each kind of quote: its opening mark, what may stand between the marks, its closing mark. */
const QUOTES: Array<[string, string, string]> = [
  ['"', String.raw`[^"\\\n]|\\.`, '"'],
  // An apostrophe between two letters is part of the value ('customer's retry').
  ["'", String.raw`[^'\\\n]|\\.|(?<=[\p{L}\p{N}])'(?=[\p{L}\p{N}])`, "'"],
  ['`', String.raw`[^\x60\n]`, '`'],
  ['“', String.raw`[^“”\n]`, '”'],
  ['‘', String.raw`[^‘’\n]|(?<=\p{L})’(?=\p{L})`, '’'],
];
const QUOTED = new RegExp(
  QUOTES.map(
    ([open, inside, close]) =>
      `${EDGE_BEFORE}${open}(?:${NO_SENTENCE_END}(?:${inside}))*${NOT_A_SENTENCE}${close}${EDGE_AFTER}`,
  ).join('|'),
  'gu',
);

const EMAIL = /(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+/g;
/** A URL's query string: its values vary, and a `?` alone is punctuation. */
const QUERY = /\?[^\s()<>"'[\]?=]*=[^\s()<>"'[\]]*/g;
/** UUIDs, and hex in three parts or more (AWS X-Ray trace ids). */
const DASHED_HEX = /(?<![\w-])(?=[\w-]*\d)[0-9a-f]+(?:-[0-9a-f]+){2,}(?![\w-])/gi;
/** 26 characters of Crockford's base32, a time first. */
const ULID = /(?<!\w)[0-7][0-9a-hjkmnp-tv-z]{25}(?!\w)/gi;
/** Stripe's and the like: `req_…`, `pi_3N…`, `cus_…`, `sk_test_…`, `ord_…`. */
const PREFIXED = /(?<![\w-])[a-z]+(?:_[a-z]+)*_([A-Za-z0-9]{4,})(?![\w-])/g;
/** Base64 and base64url (S3's extended request ids, JWTs' parts, API keys). */
const BASE64ISH = /(?<![\w+/-])[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])/g;
const HEX_NUMBER = /\b0x[0-9a-f]+\b/gi;
const LONG_HEX = /(?<!\w)(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}(?!\w)/gi;
/** Single-case ids with digits (cuid, base36): long, and with digits no word has. */
const LONG_ALPHANUMERIC = /(?<!\w)(?=(?:[a-z]*\d){2})(?=\d*[a-z])[a-z0-9]{16,}(?!\w)/gi;
const DOTTED_IDS = /<id>(?:\.<id>)+/g;
const NUMBER = /\d+(?:\.\d+)*/g;

/** A word, a CamelCase name or an ALLCAPS code, perhaps numbered: what names and paths are made of. */
const WORDY = /^(?:[A-Z]*[a-z]*|[A-Z]?[a-z]{2,}(?:[A-Z][a-z]{2,})*)\d*$/;
const hasDigit = (text: string) => /\d/.test(text);
const mixedCase = (text: string) => /[a-z]/.test(text) && /[A-Z]/.test(text);

/** A token of mixed case and digits, unless every part of it reads as a word (a path, an ARN, a class name). */
function randomToken(token: string): boolean {
  if (!mixedCase(token)) return false;
  return !token
    .replace(/=+$/, '')
    .split(/[+/_-]/)
    .every((part) => WORDY.test(part));
}

/** A JSON key: a quoted name a colon follows. */
const BEFORE_COLON = /^\s*:/;
/** The value of a JSON field that names the error's class or code: the failure's identity, not a detail. */
const AFTER_IDENTITY_KEY = /"(?:code|errorCode|error_code|name|type|reason)"\s*:\s*$/i;

/**
 * The value of a JSON field that holds a code — `"code":"23505"`, `"status":404`, `"errno":-111` — a
 * number or a short token: 404 and 500, Prisma's P2002 and P2025, SQLSTATE 23505 and 23503 are
 * different failures, so their digits are kept where every other number is masked. A token with more
 * than 8 digits is data (a time, an id), not a code.
 */
const CODE_FIELD =
  /(?<="(?:code|errorCode|error_code|status|statusCode|status_code|errno|sqlState|sql_state)"\s*:\s*)(?:-?\d{1,8}(?=\s*[,}\]])|"(?!(?:[^"\d]*\d){9})[\w.:-]{1,32}")/gi;
/**
 * A code as `describeError` writes one for a rejection that is not an Error ("… (code 23505)",
 * "non-Error rejection: code P2002"), and a SQLSTATE in prose ("SQLSTATE[23000]").
 */
const CODE_IN_TEXT = /(?<=\(code |: code )[\w.:-]{1,32}(?=\)|;|$)|(?<=\bSQLSTATE\s?[[(:=]?\s?)[0-9A-Z]{5}\b/g;
/** Private-use characters stand for the codes while the rest is masked: no pattern below touches them. */
const MARK = 0xe000;
const MARKS = 0x1900;
const MARKED = /[\ue000-\uf8ff]/g;

/** The text with each code replaced by a mark, and the codes, which `restoreCodes` puts back. */
function setCodesApart(error: string): { text: string; codes: string[] } {
  const codes: string[] = [];
  const mark = (code: string) => (codes.length < MARKS ? String.fromCharCode(MARK + codes.push(code) - 1) : code);
  const text = error.replace(MARKED, '\ufffd').replace(CODE_FIELD, mark).replace(CODE_IN_TEXT, mark);
  return { text, codes };
}

function restoreCodes(text: string, codes: string[]): string {
  return text.replace(MARKED, (mark) => codes[mark.charCodeAt(0) - MARK]);
}

/**
 * Quotes that stay as written: JSON keys (so that errors serialised as JSON are grouped by their shape,
 * not all into one) and the values of fields such as `code` and `name` (ECONNREFUSED and ENOTFOUND are
 * two failures).
 */
function keptQuote(text: string, at: number, length: number): boolean {
  return (
    BEFORE_COLON.test(text.slice(at + length, at + length + 8)) ||
    AFTER_IDENTITY_KEY.test(text.slice(Math.max(0, at - 24), at))
  );
}

/**
 * An error with what differs between occurrences of the same failure replaced by placeholders: quoted
 * values, ids (UUIDs, ULIDs, prefixed, hex, base64), e-mail addresses, URLs' query strings and numbers.
 * Words are never masked, so two failures worded differently never share a signature; nor are JSON keys
 * or an error's code and name given as JSON fields.
 */
export function errorSignature(error: string): string {
  const { text, codes } = setCodesApart(error);
  const masked = text
    .replace(QUOTED, (quoted, at: number, text: string) =>
      keptQuote(text, at, quoted.length) ? quoted : `${quoted[0]}…${quoted[quoted.length - 1]}`,
    )
    .replace(EMAIL, '<email>')
    .replace(QUERY, '?…')
    .replace(DASHED_HEX, (hex) => (hex.length >= 16 ? '<id>' : hex))
    .replace(ULID, '<id>')
    .replace(PREFIXED, (id, suffix: string) =>
      hasDigit(suffix) || (suffix.length >= 10 && randomToken(suffix)) ? '<id>' : id,
    )
    .replace(BASE64ISH, (token) => (hasDigit(token) && randomToken(token) ? '<id>' : token))
    .replace(HEX_NUMBER, '<n>')
    .replace(LONG_HEX, '<id>')
    .replace(LONG_ALPHANUMERIC, '<id>')
    .replace(DOTTED_IDS, '<id>')
    .replace(NUMBER, '<n>');
  return restoreCodes(masked, codes).replace(/\s+/g, ' ').trim().slice(0, SIGNATURE_LENGTH);
}

/** The group of a dead letter: its topic and the signature of its error, hashed into a short id. */
export function errorFingerprint(topic: string, signature: string): string {
  return createHash('sha256').update(topic).update('\0').update(signature).digest('hex').slice(0, 16);
}
