/** A publish request after validation: ready to insert. */
export interface ValidatedEvent {
  topic: string;
  key: string | null;
  dedupeKey: string | null;
  payloadJson: string;
  headersJson: string;
  headers: Record<string, string>;
  /** The publisher's trace context, JSON (see `OutboxTracer.publish`); none when absent or null. */
  traceContextJson?: string | null;
  /** Absolute due time given by the caller, or null for "delayMs after now by the database clock". */
  availableAt: Date | null;
  delayMs: number;
}
