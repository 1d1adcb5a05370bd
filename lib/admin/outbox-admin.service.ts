import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { OutboxEvents } from '../events/outbox-events';
import type {
  OutboxBlockedKey,
  OutboxEventDetails,
  OutboxEventFilter,
  OutboxEventView,
  OutboxFailureGroup,
  OutboxOperationResult,
  OutboxPageRequest,
  OutboxSelection,
  OutboxStats,
} from '../interfaces/outbox-operations.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import { validateOperationOptions, validateSelection } from '../operations/operations-input';
import { OutboxOperations } from '../operations/outbox-operations.service';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { OutboxStore } from '../store/outbox.store';
import { AdminAudit, type OutboxAdminAuditPage } from './admin-audit';
import { OUTBOX_ADMIN_OPTIONS } from './admin-constants';
import type { ResolvedAdminOptions } from './admin-options';

export type OutboxAdminAction = 'redrive' | 'discard' | 'deliverNow';

/** A badge of the overview: shown only when something is wrong. */
export interface OutboxAdminBadge {
  kind: 'dead' | 'stalled' | 'blocked';
  count: number;
}

/** An event in a list: what it is and where it stands, its payload's size instead of the payload. */
export type OutboxAdminListedEvent = Omit<OutboxEventView, 'payload' | 'headers' | 'completedHandlers'> & {
  payloadBytes: number;
};

/** An event as the page shows it: its payload and headers as `redact` lets them out, cut above `maxPayloadBytes`. */
export type OutboxAdminEventDetails = Omit<OutboxEventDetails, 'completedHandlers'> & {
  payloadBytes: number;
  payloadTruncated: boolean;
  /** The payload's JSON cut to `maxPayloadBytes`, when `payloadTruncated` (then `payload` is null). */
  payloadPreview?: string;
  /** The unfinished events of its key, oldest first (at most 20), itself included. */
  keyEvents: Array<{ id: string; state: string; createdAt: Date }>;
};

const UNFINISHED: OutboxEventFilter['status'] = ['due', 'scheduled', 'in_flight', 'waiting', 'dead'];

/**
 * The admin page's side of the server: reads through `OutboxOperations` (the one way to the table),
 * the stats shared by every open page, what of an event leaves the server, and every mutation written
 * to the audit trail before it runs.
 */
@Injectable()
export class OutboxAdminService implements OnModuleInit {
  readonly audit: AdminAudit;
  private stats?: { at: number; value: Promise<OutboxStats> };

  constructor(
    @Inject(OUTBOX_ADMIN_OPTIONS) readonly options: ResolvedAdminOptions,
    @Inject(OUTBOX_STORE) store: OutboxStore,
    @Inject(OUTBOX_OPTIONS) private readonly outboxOptions: ResolvedOutboxOptions,
    private readonly operations: OutboxOperations,
    private readonly lifecycle: OutboxEvents,
  ) {
    this.audit = new AdminAudit(store, options.auditTableName);
  }

  onModuleInit(): Promise<void> {
    return this.audit.check();
  }

  /**
   * The stats at most `refreshMs` old: one query per period for the process, however many pages poll
   * (a query in flight is shared; a failed one is not kept).
   */
  async overview(): Promise<{ stats: OutboxStats; badges: OutboxAdminBadge[] }> {
    const now = Date.now();
    if (!this.stats || now - this.stats.at >= this.options.refreshMs) {
      const value = this.operations.stats();
      this.stats = { at: now, value };
      value.catch(() => {
        if (this.stats?.value === value) this.stats = undefined;
      });
    }
    const stats = await this.stats.value;
    return { stats, badges: this.badges(stats) };
  }

  private badges(stats: OutboxStats): OutboxAdminBadge[] {
    const badges: OutboxAdminBadge[] = [];
    if (stats.dead > 0) badges.push({ kind: 'dead', count: stats.dead });
    const after = this.options.stalledAfterMs;
    const sinceClaim = stats.lastClaimAt ? stats.at.getTime() - stats.lastClaimAt.getTime() : Infinity;
    if (stats.due > 0 && (stats.oldestDueAgeMs ?? 0) >= after && sinceClaim >= after) {
      badges.push({ kind: 'stalled', count: stats.due });
    }
    if (stats.blockedKeys > 0) badges.push({ kind: 'blocked', count: stats.blockedKeys });
    return badges;
  }

  async events(
    filter: OutboxEventFilter,
    page: OutboxPageRequest,
  ): Promise<{ items: OutboxAdminListedEvent[]; nextCursor: string | null }> {
    const found = await this.operations.find(filter, page);
    const items = found.items.map(({ payload, headers: _headers, completedHandlers: _old, ...rest }) => ({
      ...rest,
      payloadBytes: Buffer.byteLength(JSON.stringify(payload) ?? ''),
    }));
    return { items, nextCursor: found.nextCursor };
  }

  async event(id: string): Promise<OutboxAdminEventDetails> {
    const event = await this.operations.getOrFail(id);
    const shown = this.options.redact ? this.options.redact(event) : event;
    const { completedHandlers: _old, ...rest } = event;
    const json = JSON.stringify(shown.payload) ?? 'null';
    const bytes = Buffer.byteLength(json);
    const cut = bytes > this.options.maxPayloadBytes;
    return {
      ...rest,
      payload: cut ? null : shown.payload,
      headers: shown.headers,
      payloadBytes: bytes,
      payloadTruncated: cut,
      ...(cut ? { payloadPreview: Buffer.from(json).subarray(0, this.options.maxPayloadBytes).toString() } : {}),
      keyEvents: event.key === null ? [] : await this.keyEvents(event.key),
    };
  }

  private async keyEvents(key: string): Promise<OutboxAdminEventDetails['keyEvents']> {
    const { items } = await this.operations.find({ key, status: UNFINISHED }, { limit: 20, order: 'oldest' });
    return items.map((e) => ({ id: e.id, state: e.state, createdAt: e.createdAt }));
  }

  failureGroups(topic?: string): Promise<OutboxFailureGroup[]> {
    return this.operations.failureGroups(topic === undefined ? undefined : { topic });
  }

  blockedKeys(limit: number): Promise<OutboxBlockedKey[]> {
    return this.operations.blockedKeys({ limit });
  }

  auditTrail(limit: number, cursor?: string): Promise<OutboxAdminAuditPage> {
    return this.audit.page(limit, cursor);
  }

  /**
   * Runs a mutation: a dry run only counts; a real one is written to the audit trail first (or does not
   * run), then completed with its counts or its error, and emitted as `admin.action`.
   */
  async mutate(
    action: OutboxAdminAction,
    selection: OutboxSelection,
    options: Record<string, boolean>,
    actor: string | null,
  ): Promise<OutboxOperationResult & { auditId: string | null }> {
    const run = () => this.operations[action](selection, options);
    if (options.dryRun === true) return { ...(await run()), auditId: null };
    // The operations' own checks, first: input they refuse leaves no row in the trail.
    validateSelection(selection);
    validateOperationOptions(options, action === 'redrive' ? ['dryRun', 'resetAttempts'] : ['dryRun']);
    const auditId = await this.audit.begin(actor, action, selection, options);
    let result: OutboxOperationResult;
    try {
      result = await run();
    } catch (error) {
      await this.audit.finish(auditId, undefined, this.outboxOptions.errorText.describe(error));
      throw error;
    }
    await this.audit.finish(auditId, result);
    this.lifecycle.emit({
      type: 'admin.action',
      auditId,
      actor,
      action,
      selection,
      matched: result.matched,
      changed: result.changed,
    });
    return { ...result, auditId };
  }
}
