/** A mutation the admin page is about to run, as its audit trail records it first. */
export interface AuditEntry {
  id: string;
  actor: string | null;
  action: string;
  /** JSON of the selection, cut to what the column keeps. */
  selection: string;
  /** JSON of the mutation's options. */
  options: string;
}

/** How a mutation ended, written to its audit row. */
export interface AuditOutcome {
  matched: number | null;
  changed: number | null;
  skipped: number | null;
  outcome: 'done' | 'failed';
  error: string | null;
}
