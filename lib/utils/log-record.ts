import { inspect } from 'node:util';

/** What a log line of the outbox says it is about, as fields a JSON logger keeps apart from the text. */
export interface OutboxLogFields {
  eventId?: string;
  /** A line about several events (a batch's acknowledgement, a renewal). */
  eventIds?: string[];
  topic?: string;
  /** The event's key, for a line about one keyed event. */
  key?: string;
}

/**
 * A log line with its fields, handed to Nest's `Logger` as the message. Each logger takes what it reads:
 * Nest's `ConsoleLogger` prints the text alone (`util.inspect` gives it), and in JSON mode the text and
 * fields under `message`; `nestjs-pino` merges the own fields (`msg`, `eventId`, `topic`, `key`) into the line;
 * `nest-winston` reads `message` for the text and the rest as metadata; `String()` gives the text.
 */
export class OutboxLogRecord implements OutboxLogFields {
  readonly msg: string;
  readonly eventId?: string;
  readonly eventIds?: string[];
  readonly topic?: string;
  readonly key?: string;

  constructor(msg: string, fields: OutboxLogFields) {
    this.msg = msg;
    // Only the fields given: a logger that copies the record copies no undefined.
    if (fields.eventId !== undefined) this.eventId = fields.eventId;
    if (fields.eventIds !== undefined) this.eventIds = fields.eventIds;
    if (fields.topic !== undefined) this.topic = fields.topic;
    if (fields.key !== undefined) this.key = fields.key;
  }

  /** The text, for loggers that read `message` (not an own field: JSON and copies carry `msg` once). */
  get message(): string {
    return this.msg;
  }

  /** The same fields with another text (redaction). */
  withText(msg: string): OutboxLogRecord {
    return new OutboxLogRecord(msg, this);
  }

  toString(): string {
    return this.msg;
  }

  [inspect.custom](): string {
    return this.msg;
  }
}

/** A log line about an event (its id), events (their ids) or `fields`: its text, and the fields for JSON loggers. */
export function aboutEvents(text: string, about: string | string[] | OutboxLogFields): OutboxLogRecord {
  const fields = typeof about === 'string' ? { eventId: about } : Array.isArray(about) ? { eventIds: about } : about;
  return new OutboxLogRecord(text, fields);
}

/** A log line about one event: its id, topic and, when it has one, its key as fields. */
export function aboutEvent(text: string, event: { id: string; topic: string; key?: string | null }): OutboxLogRecord {
  const { id: eventId, topic, key } = event;
  return new OutboxLogRecord(text, key === undefined || key === null ? { eventId, topic } : { eventId, topic, key });
}
