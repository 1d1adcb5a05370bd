import type { StoredEvent } from '../dialects/shared/outbox-dialect.interface';
import { OutboxValidationError } from '../errors/outbox.errors';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { canonicalJson } from '../utils/canonical-json';

/*
 * How publish() tells a repeated dedupe key from a conflict: the same key stands for the same event
 * when topic, key, payload and headers are equal (JSON compared canonically, so key order in objects
 * does not matter). The publisher's trace context is not compared: another request's retry carries
 * another trace, and it is still the same event.
 */

/** The error for a dedupe key the table's unique index took for another one (a padding collation). */
export function keyNotStored(key: string, found: StoredEvent[]): OutboxValidationError {
  const taken = found.find((event) => event.dedupeKey!.trimEnd() === key.trimEnd());
  return new OutboxValidationError(
    'dedupeKey',
    `"${key}" was not stored: the table's unique index took it for ` +
      (taken ? `the existing key "${taken.dedupeKey}" (event ${taken.id})` : 'an existing key') +
      '. Its collation ignores trailing spaces (MySQL/MariaDB before schema version 6): run the outbox migrations.',
  );
}

export function sameContent(a: ValidatedEvent, b: ValidatedEvent): boolean {
  return (
    a.topic === b.topic &&
    a.key === b.key &&
    canonicalJson(JSON.parse(a.payloadJson)) === canonicalJson(JSON.parse(b.payloadJson)) &&
    canonicalJson(a.headers) === canonicalJson(b.headers)
  );
}

export function sameStored(stored: StoredEvent, event: ValidatedEvent): boolean {
  return (
    stored.topic === event.topic &&
    stored.key === event.key &&
    canonicalJson(stored.payload) === canonicalJson(JSON.parse(event.payloadJson)) &&
    canonicalJson(stored.headers) === canonicalJson(event.headers)
  );
}
