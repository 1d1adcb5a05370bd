import type { TestApp } from '../../fixtures/test-app';

/** The payload of the ordering tests' events: the transaction (or step) that published it. */
export interface Step {
  tx: string;
  fail?: boolean;
}

/** The `tx` of a raw row's payload (JSON text on MySQL and SQLite). */
export function txOf(row: Record<string, unknown>): string {
  return ((typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload) as Step).tx;
}

/** Drains until a drain finds nothing to do: every event delivered, dead, or not due. */
export async function drainAll(app: TestApp): Promise<void> {
  for (let i = 0; i < 50; i++) {
    const r = await app.worker.drain();
    if (r.delivered + r.failed + r.deadLettered + r.released === 0) return;
  }
  throw new Error('the outbox did not settle in 50 drains');
}
