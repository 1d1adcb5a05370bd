export type OutboxStatus = 'pending' | 'delivered' | 'dead';

/** One row of the outbox table, as the worker and the entity read it on every database. */
export interface OutboxEventRecord {
  id: string;
  topic: string;
  key: string | null;
  dedupeKey: string | null;
  payload: unknown;
  headers: Record<string, string>;
  /** `pending` also covers events claimed by a worker (`claimToken` set, lease in `availableAt`). */
  status: OutboxStatus;
  attempts: number;
  /** Due time; while claimed, the end of the lease. */
  availableAt: Date;
  claimToken: string | null;
  /** Names of the handlers that already succeeded. */
  completedHandlers: string[];
  lastError: string | null;
  createdAt: Date;
  /** When the event was delivered or dead-lettered. */
  processedAt: Date | null;
}
