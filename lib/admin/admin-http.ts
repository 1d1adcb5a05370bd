import { randomBytes, timingSafeEqual } from 'node:crypto';
import { OutboxAdminForbiddenError } from '../errors/outbox.errors';

/**
 * The little the admin page needs from a request and a response, the same on Express and Fastify:
 * both have `headers` and a `url` on the request, and `header(name, value)` on the response.
 */
export interface AdminRequest {
  headers: Record<string, string | string[] | undefined>;
  url?: string;
  originalUrl?: string;
  protocol?: string;
  secure?: boolean;
  user?: unknown;
}

export interface AdminResponse {
  header(name: string, value: string): unknown;
}

export const CSRF_HEADER = 'x-outbox-csrf';
const CSRF_COOKIE = 'outbox_admin_csrf';
const TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** Strict: the page's own scripts and styles only, no inline code, no frames, no form posts elsewhere. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Headers on every answer of the page and its API. */
export function secureHeaders(response: AdminResponse, cache: 'none' | 'asset'): void {
  response.header('Content-Security-Policy', CSP);
  response.header('X-Content-Type-Options', 'nosniff');
  response.header('Referrer-Policy', 'no-referrer');
  response.header('X-Frame-Options', 'DENY');
  response.header('Cache-Control', cache === 'asset' ? 'private, max-age=300' : 'no-store');
}

function header(request: AdminRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The request's path as the client sent it (the app's global prefix included), without its query. */
function requestPath(request: AdminRequest): string {
  const url = request.originalUrl ?? request.url ?? '/';
  return url.split('?')[0];
}

/**
 * Where the page is mounted as the client sees it: the request's path up to the configured `path`
 * (so a global prefix, or a proxy's rewrite before the app, is kept).
 */
export function basePath(request: AdminRequest, path: string): string {
  const seen = requestPath(request);
  const mount = `/${path}`;
  const at = seen.lastIndexOf(`${mount}/`);
  if (at >= 0) return seen.slice(0, at + mount.length);
  return seen.endsWith(mount) ? seen : mount;
}

function cookie(request: AdminRequest, name: string): string | undefined {
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

function isHttps(request: AdminRequest): boolean {
  return request.secure === true || request.protocol === 'https';
}

/**
 * The CSRF token of this browser: the one its cookie holds, or a new one set in a cookie that only this
 * page's path receives and no other site's request carries (`SameSite=Strict`), and no script reads.
 */
export function csrfToken(request: AdminRequest, response: AdminResponse, base: string): string {
  const held = cookie(request, CSRF_COOKIE);
  if (held && TOKEN.test(held)) return held;
  const token = randomBytes(32).toString('base64url');
  const secure = isHttps(request) ? '; Secure' : '';
  response.header('Set-Cookie', `${CSRF_COOKIE}=${token}; Path=${base}; HttpOnly; SameSite=Strict${secure}`);
  return token;
}

/** Refuses a mutation whose header does not carry its cookie's token (double submit). */
export function checkCsrf(request: AdminRequest): void {
  const sent = header(request, CSRF_HEADER);
  const held = cookie(request, CSRF_COOKIE);
  if (!sent || !held || !TOKEN.test(held) || sent.length !== held.length) {
    throw new OutboxAdminForbiddenError(
      `a mutation needs the CSRF token: read it from GET api/v1/session (which sets its cookie) and send it in the ${CSRF_HEADER} header`,
    );
  }
  if (!timingSafeEqual(Buffer.from(sent), Buffer.from(held))) {
    throw new OutboxAdminForbiddenError(`the ${CSRF_HEADER} header does not match this browser's CSRF cookie`);
  }
}

/** Refuses a mutation a browser sent from another site (its `Origin` or `Sec-Fetch-Site` says so). */
export function checkSameOrigin(request: AdminRequest): void {
  const site = header(request, 'sec-fetch-site');
  if (site === 'cross-site' || site === 'same-site') {
    throw new OutboxAdminForbiddenError('a mutation from another site is refused');
  }
  const origin = header(request, 'origin');
  const host = header(request, 'x-forwarded-host') ?? header(request, 'host');
  if (origin === undefined || origin === 'null' || host === undefined) return;
  let originHost: string;
  try {
    originHost = new URL(origin).host;
  } catch {
    throw new OutboxAdminForbiddenError('a mutation with a malformed Origin header is refused');
  }
  if (originHost !== host) throw new OutboxAdminForbiddenError(`a mutation from another origin (${origin}) is refused`);
}

/** Who made the request: the application's hook, else a name or id of the request's `user`. */
export function actorOf(request: AdminRequest, hook?: (request: unknown) => string | undefined | null): string | null {
  const named = hook ? hook(request) : defaultActor(request.user);
  if (named === undefined || named === null || named === '') return null;
  return String(named).slice(0, 255);
}

function defaultActor(user: unknown): string | undefined {
  if (user === null || typeof user !== 'object') return typeof user === 'string' ? user : undefined;
  const fields = user as Record<string, unknown>;
  for (const name of ['id', 'sub', 'email', 'username', 'name']) {
    const value = fields[name];
    if (typeof value === 'string' || typeof value === 'number') return String(value);
  }
  return undefined;
}
