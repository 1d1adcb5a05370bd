import { createHmac, timingSafeEqual } from 'node:crypto';

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
export function signWebhookBody(body: string, secret: string, nowMs = Date.now()): string {
  const t = Math.floor(nowMs / 1000).toString();
  return `t=${t},v1=${hmac(secret, t, body).toString('hex')}`;
}

function hmac(secret: string, timestamp: string, body: string | Uint8Array): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`, 'utf8').update(body).digest();
}

/**
 * Checks a signature header sent by {@link WebhookTransport}: `t=<unix seconds>,v1=<hex>`. `body` must
 * be the raw request body as received (re-serialising parsed JSON changes the bytes). Returns false
 * when the header is malformed, the timestamp is more than `toleranceSeconds` away from `now` (in
 * either direction, allowing for clock skew), or no `v1` value matches. Several `v1` values are
 * accepted so a sender can sign with an old and a new secret while they are rotated.
 */
export function verifyWebhookSignature(
  body: string | Uint8Array,
  header: string,
  secret: string,
  toleranceSeconds = 300,
  now: number = Date.now(),
): boolean {
  if (typeof header !== 'string' || typeof secret !== 'string' || secret === '') return false;
  let timestamp: string | undefined;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't') {
      // Two timestamps make it ambiguous which one the signature covers.
      if (timestamp !== undefined) return false;
      timestamp = value;
    } else if (name === 'v1') {
      candidates.push(value);
    }
  }
  if (timestamp === undefined || !/^\d{1,12}$/.test(timestamp)) return false;
  if (!(Math.abs(now / 1000 - Number(timestamp)) <= toleranceSeconds)) return false;
  const expected = hmac(secret, timestamp, body);
  let matched = false;
  for (const candidate of candidates) {
    if (!/^[0-9a-fA-F]{64}$/.test(candidate)) continue;
    // No early exit: the time taken must not tell which candidate matched.
    if (timingSafeEqual(Buffer.from(candidate, 'hex'), expected)) matched = true;
  }
  return matched;
}
