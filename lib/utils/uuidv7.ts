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

/** The last id's milliseconds and its 12-bit sequence (`rand_a`): ids of one process only grow. */
let lastMs = -1;
let sequence = 0;
/** How far behind the last id's time a clock may be and still count as the same millisecond. */
const CLOCK_SLACK_MS = 1000;

/**
 * A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, a 12-bit sequence, then 62 random bits.
 * Within a process ids are strictly increasing (the sequence counts up within a millisecond, starting
 * at a random value below 2048; when it runs out the time moves a millisecond ahead), so ordering by
 * id is ordering by creation; across processes, by creation millisecond.
 */
export function uuidv7(now: number = Date.now()): string {
  if (now > lastMs || lastMs - now > CLOCK_SLACK_MS) {
    lastMs = now;
    sequence = random10()[0] << 3;
  } else if (++sequence > 0xfff) {
    lastMs++;
    sequence = 0;
  }
  const bytes = Buffer.allocUnsafe(16);
  bytes.writeUIntBE(lastMs, 0, 6);
  random10().copy(bytes, 6);
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  let s = '';
  for (let i = 0; i < 16; i++) {
    s += HEX[bytes[i]];
    if (i === 3 || i === 5 || i === 7 || i === 9) s += '-';
  }
  return s;
}
