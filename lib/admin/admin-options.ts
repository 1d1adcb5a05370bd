import type { CanActivate, ExecutionContext, Type } from '@nestjs/common';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxEventDetails } from '../interfaces/outbox-operations.interface';
import { DEFAULT_AUDIT_TABLE_NAME } from '../schema/admin-migrations';
import { validateTableName } from '../schema/table-name';
import { describeValue } from '../utils/describe-value';
import { booleanOption, integerOption, isPlainObject, rejectUnknownOptions } from '../utils/option-checks';

/** What of an event may leave the server: the payload and headers the page and the API show. */
export interface OutboxAdminShownEvent {
  payload: unknown;
  headers: Record<string, string>;
}

/** Who may reach the page and its API, and where it is: fixed when the module is declared (they shape its routes). */
export interface OutboxAdminAccessOptions {
  /** Where the page is mounted, under the app's global prefix. Default `outbox-admin`. */
  path?: string;
  /** Guards every request of the page and its API passes, after the app's global guards: classes (resolved by Nest) or instances. */
  guards?: Array<Type<CanActivate> | CanActivate>;
  /** A guard as a function: true lets the request through. */
  canActivate?: (context: ExecutionContext) => boolean | Promise<boolean>;
  /**
   * Runs the page with no guard of its own, so anyone who reaches the app can read every event and
   * redrive or discard them. For local development only.
   */
  unsafeAllowAnonymous?: boolean;
}

/** The options of `OutboxAdminModule.forRoot()` (the rest of them is what `forRootAsync`'s factory returns). */
export interface OutboxAdminModuleOptions extends OutboxAdminAccessOptions, OutboxAdminBehaviour {}

/** What the page does for the requests its guards let through. */
export interface OutboxAdminBehaviour {
  /** Refuse every mutation on the server (403), and show no action in the page. Default false. */
  readOnly?: boolean;
  /**
   * Mutations need the CSRF token of `GET api/v1/session` in the `x-outbox-csrf` header. Default true;
   * turn it off only for an API reached with bearer tokens, never with cookies.
   */
  csrf?: boolean;
  /** Who made a request, for the audit trail. Default: the request's `user` (its `id`, `sub`, `email`, `username` or `name`). */
  actor?: (request: unknown) => string | undefined | null;
  /** What of an event's payload and headers may leave the server (e.g. with personal data masked). */
  redact?: (event: OutboxEventDetails) => OutboxAdminShownEvent;
  /** A payload of more bytes (as JSON) is sent cut, with its size. Default 65,536. */
  maxPayloadBytes?: number;
  /** How often an open page refreshes, and how old the shared stats behind it may be, in ms. Default 5,000. */
  refreshMs?: number;
  /** Due work with no claim for this long, in ms, shows the "nothing claimed" badge. Default 60,000. */
  stalledAfterMs?: number;
  /** The audit trail's table (its migrations: `createOutboxAdminMigrations(name)`). Default `outbox_admin_audit`. */
  auditTableName?: string;
}

export interface ResolvedAdminAccess {
  path: string;
  guards: Array<Type<CanActivate> | CanActivate>;
  canActivate?: (context: ExecutionContext) => boolean | Promise<boolean>;
}

export interface ResolvedAdminOptions {
  readOnly: boolean;
  csrf: boolean;
  actor?: (request: unknown) => string | undefined | null;
  redact?: (event: OutboxEventDetails) => OutboxAdminShownEvent;
  maxPayloadBytes: number;
  refreshMs: number;
  stalledAfterMs: number;
  auditTableName: string;
}

const ACCESS_KEYS = ['path', 'guards', 'canActivate', 'unsafeAllowAnonymous'];
const BEHAVIOUR_KEYS = [
  'readOnly',
  'csrf',
  'actor',
  'redact',
  'maxPayloadBytes',
  'refreshMs',
  'stalledAfterMs',
  'auditTableName',
];
export const ADMIN_OPTION_KEYS = [...ACCESS_KEYS, ...BEHAVIOUR_KEYS];

/** A path of URL segments: letters, digits, `-`, `_`, `.`, separated by `/`. */
const PATH = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;

function objectOf(option: string, value: unknown): Record<string, unknown> {
  if (!isPlainObject(value)) {
    throw new OutboxConfigurationError(option, `expected an options object, got ${describeValue(value)}`);
  }
  return value;
}

function functionOption<T>(option: string, value: unknown): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') {
    throw new OutboxConfigurationError(option, `expected a function, got ${describeValue(value)}`);
  }
  return value as T;
}

/** The path and the guards, checked: with neither a guard nor `unsafeAllowAnonymous: true` the page is refused. */
export function resolveAdminAccess(options: unknown, allowed: readonly string[] = ACCESS_KEYS): ResolvedAdminAccess {
  const given = objectOf('admin', options ?? {});
  rejectUnknownOptions('admin', given, allowed);
  const raw = given.path ?? 'outbox-admin';
  const path = typeof raw === 'string' ? raw.replace(/^\/+|\/+$/g, '') : raw;
  if (typeof path !== 'string' || !PATH.test(path) || path.split('/').some((s) => s === '.' || s === '..')) {
    throw new OutboxConfigurationError(
      'admin.path',
      `expected URL path segments of letters, digits, ".", "_" and "-" separated by "/", got ${describeValue(raw)}`,
    );
  }
  const guards = given.guards ?? [];
  if (
    !Array.isArray(guards) ||
    guards.some((g) => typeof g !== 'function' && typeof (g as CanActivate | null)?.canActivate !== 'function')
  ) {
    throw new OutboxConfigurationError(
      'admin.guards',
      `expected an array of guard classes or instances (objects with canActivate()), got ${describeValue(guards)}`,
    );
  }
  const canActivate = functionOption<ResolvedAdminAccess['canActivate']>('admin.canActivate', given.canActivate);
  const anonymous = booleanOption('admin.unsafeAllowAnonymous', given.unsafeAllowAnonymous, false);
  const guarded = guards.length > 0 || canActivate !== undefined;
  if (!guarded && !anonymous) {
    throw new OutboxConfigurationError(
      'admin',
      'the admin page shows every event and can redrive or discard them, so it needs a guard: give `guards` ' +
        '(your CanActivate classes, e.g. the one that checks your JWT or session and role) or `canActivate`. ' +
        'For local development only, `unsafeAllowAnonymous: true` runs it without one',
    );
  }
  if (guarded && anonymous) {
    throw new OutboxConfigurationError(
      'admin.unsafeAllowAnonymous',
      'it says the page has no guard, but guards are given: remove one or the other',
    );
  }
  return { path, guards: guards as ResolvedAdminAccess['guards'], canActivate };
}

/** What the page does, checked, with its defaults. */
export function resolveAdminBehaviour(
  options: unknown,
  allowed: readonly string[] = BEHAVIOUR_KEYS,
): ResolvedAdminOptions {
  const given = objectOf('admin', options ?? {});
  rejectUnknownOptions('admin', given, allowed);
  return {
    readOnly: booleanOption('admin.readOnly', given.readOnly, false),
    csrf: booleanOption('admin.csrf', given.csrf, true),
    actor: functionOption('admin.actor', given.actor),
    redact: functionOption('admin.redact', given.redact),
    maxPayloadBytes: integerOption('admin.maxPayloadBytes', given.maxPayloadBytes, 65_536, 256, 16 * 2 ** 20),
    refreshMs: integerOption('admin.refreshMs', given.refreshMs, 5_000, 1_000, 600_000),
    stalledAfterMs: integerOption('admin.stalledAfterMs', given.stalledAfterMs, 60_000, 1_000, 86_400_000),
    auditTableName: validateTableName(given.auditTableName ?? DEFAULT_AUDIT_TABLE_NAME, 'admin.auditTableName'),
  };
}

/** Both halves of `forRoot()`'s options. */
export function resolveAdminOptions(options: OutboxAdminModuleOptions | undefined): {
  access: ResolvedAdminAccess;
  behaviour: ResolvedAdminOptions;
} {
  const given = objectOf('admin', options ?? {});
  rejectUnknownOptions('admin', given, ADMIN_OPTION_KEYS);
  const pick = (keys: string[]) => Object.fromEntries(Object.entries(given).filter(([k]) => keys.includes(k)));
  return { access: resolveAdminAccess(pick(ACCESS_KEYS)), behaviour: resolveAdminBehaviour(pick(BEHAVIOUR_KEYS)) };
}

export { ACCESS_KEYS as ADMIN_ACCESS_KEYS, BEHAVIOUR_KEYS as ADMIN_BEHAVIOUR_KEYS };
