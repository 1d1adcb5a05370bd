import { randomBytes } from 'node:crypto';

const POOL_SIZE = 16 * 256;
let pool = Buffer.alloc(0);
let offset = POOL_SIZE;

function random10(): Buffer {
  if (offset + 10 > pool.length) {
    pool = randomBytes(POOL_SIZE);
    offset = 0;
  }
  const out = pool.subarray(offset, offset + 10);
  offset += 10;
  return out;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/**
 * A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits. Ids sort roughly
 * by creation time, which keeps the primary-key index compact; nothing relies on that order.
 */
export function uuidv7(now: number = Date.now()): string {
  const bytes = Buffer.allocUnsafe(16);
  bytes.writeUIntBE(now, 0, 6);
  random10().copy(bytes, 6);
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  let s = '';
  for (let i = 0; i < 16; i++) {
    s += HEX[bytes[i]];
    if (i === 3 || i === 5 || i === 7 || i === 9) s += '-';
  }
  return s;
}
