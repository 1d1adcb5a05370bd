import { createHash } from 'node:crypto';

/** The longest signature kept: enough to read, short enough to group by. */
const SIGNATURE_LENGTH = 300;

/**
 * An error with what differs between occurrences of the same failure replaced by placeholders: quoted
 * values, UUIDs, long hex ids, e-mail addresses, URLs' query strings and numbers. "Order 42 not
 * found (id 0190…)" and "Order 7 not found (id 0191…)" read the same.
 */
export function errorSignature(error: string): string {
  return error
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '"…"')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, '<id>')
    .replace(/\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b/gi, '<id>')
    .replace(/[\w.+-]+@[\w-]+(\.[\w-]+)+/g, '<email>')
    .replace(/\?[^\s]*/g, '?…')
    .replace(/\d+(\.\d+)?/g, '<n>')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, SIGNATURE_LENGTH);
}

/** The group of a dead letter: its topic and the signature of its error, hashed into a short id. */
export function errorFingerprint(topic: string, signature: string): string {
  return createHash('sha256').update(topic).update('\0').update(signature).digest('hex').slice(0, 16);
}
