import type { RecordedOutboxMessage } from '../interfaces/outbox-message.interface';

/** A copy of a message's data for a record: its mutable parts copied, so later changes do not show. */
export function snapshotMessage(message: RecordedOutboxMessage): RecordedOutboxMessage {
  const { id, topic, key, payload, headers, attempt, createdAt } = message;
  return {
    id,
    topic,
    key,
    payload: structuredClone(payload),
    headers: { ...headers },
    attempt,
    createdAt: new Date(createdAt),
  };
}
