import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { OutboxNonRetryableError } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

// The admin page of docs/admin.md on NestJS 12's Express adapter (the compat app has no NestJS 12 Fastify
// adapter): behind the application's own guard class, its JSON API's answers — 403, 400, 404 and the
// mutations' 200 — come through NestJS 12's exception handling, which maps an error to its status only
// when it has the http-errors shape, so every status is checked exactly.

const TOKEN = 'Bearer compat-admin-secret';
const ACTOR = 'ops@example.com';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The application's own guard, as a JWT or session guard would be: an Authorization header, then `request.user`. */
class AdminGuard {
  canActivate(context) {
    const request = context.switchToHttp().getRequest();
    if (request.headers.authorization !== TOKEN) return false;
    request.user = { email: ACTOR };
    return true;
  }
}
Injectable()(AdminGuard);

class Doomed {
  async handle(message) {
    throw new OutboxNonRetryableError(`order ${message.payload.n} refused by the warehouse`);
  }
}
handlerClass(Doomed, 'handle', 'admin.doomed');

/**
 * A client of the admin API at `base` (the page's path): it keeps the CSRF cookie the server sets, as a
 * browser or a script does, and answers `{ status, headers, text, json }`.
 */
function adminClient(base, headers = {}) {
  let cookie;
  const request = async (method, path, { body, extra = {} } = {}) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...headers,
        ...(cookie ? { cookie } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...extra,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const set = response.headers.getSetCookie();
    if (set.length > 0) cookie = set[0].split(';')[0];
    const text = await response.text();
    const json = (response.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : undefined;
    return { status: response.status, headers: response.headers, text, json };
  };
  return {
    request,
    get: (path) => request('GET', `/api/v1${path}`),
    post: (path, body, extra) => request('POST', `/api/v1${path}`, { body, extra }),
    get cookie() {
      return cookie;
    },
  };
}

/** An error answer as NestJS 12 writes an http-errors-shaped error: exactly `{ statusCode, message }`. */
function assertError(answer, status, message, what) {
  assert.equal(answer.status, status, `${what}: ${answer.text}`);
  assert.deepEqual(Object.keys(answer.json).sort(), ['message', 'statusCode'], what);
  assert.equal(answer.json.statusCode, status, what);
  assert.match(answer.json.message, message, what);
}

for (const backend of BACKENDS) {
  describe(`the admin page and its API on NestJS 12 (Express) on ${backend}`, () => {
    let app;
    afterEach(async () => {
      await app?.dispose();
      app = undefined;
    });

    const start = async (admin = {}) => {
      app = await startApp(backend, {
        http: true,
        providers: [Doomed],
        outbox: { worker: { enabled: false } },
        admin: { guards: [AdminGuard], ...admin },
      });
      return {
        admin: adminClient(`${app.url}/admin/outbox`, { authorization: TOKEN }),
        anonymous: adminClient(`${app.url}/admin/outbox`),
      };
    };
    /** `count` dead letters, through the worker: each handler call throws OutboxNonRetryableError. */
    const deadLetters = async (count) => {
      const ids = [];
      await app.txHost.withTransaction(async () => {
        for (let n = 0; n < count; n++) ids.push((await app.outbox.publish('admin.doomed', { n })).id);
      });
      await app.worker.drain();
      for (const id of ids) assert.equal((await app.row(id)).status, 'dead');
      return ids;
    };
    /** The audit table, read on the test's own connection. */
    const auditRows = () => app.raw.query(`SELECT * FROM "${app.table}_audit"`);

    it('refuses the page, the API and a mutation without the guard’s credentials: 403, nothing written', async () => {
      const { anonymous } = await start();
      const [id] = await deadLetters(1);
      const page = await anonymous.request('GET', '');
      assert.equal(page.status, 403);
      assert.equal(page.json?.statusCode, 403);
      assert.equal((await anonymous.request('GET', '/assets/admin.js')).status, 403);
      const overview = await anonymous.get('/overview');
      assert.equal(overview.status, 403);
      assert.equal(overview.json.statusCode, 403);
      const session = await anonymous.get('/session');
      assert.equal(session.status, 403);
      assert.equal(anonymous.cookie, undefined, 'no CSRF cookie for a refused request');
      const redrive = await anonymous.post('/redrive', { selection: { ids: [id] } });
      assert.equal(redrive.status, 403);
      assert.equal(redrive.json.statusCode, 403);
      assert.equal((await app.row(id)).status, 'dead');
      assert.deepEqual(await auditRows(), []);
    });

    it('serves the page with a strict Content-Security-Policy, and the session its CSRF token and cookie', async () => {
      const { admin } = await start();
      const page = await admin.request('GET', '');
      assert.equal(page.status, 200, page.text);
      assert.match(page.headers.get('content-type'), /^text\/html/);
      const csp = page.headers.get('content-security-policy');
      assert.ok(csp.includes("default-src 'none'"), csp);
      assert.ok(csp.includes("script-src 'self'"), csp);
      assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(page.headers.get('cache-control'), 'no-store');
      // The page's base path, as the client sees it, written into its links (the page's own text is not checked here).
      assert.ok(page.text.includes('/admin/outbox/assets/admin.js'), 'the page links its script under its path');
      assert.ok(!page.text.includes('%BASE%'));
      const script = await admin.request('GET', '/assets/admin.js');
      assert.equal(script.status, 200);
      assert.match(script.headers.get('content-type'), /^text\/javascript/);
      assert.equal((await admin.request('GET', '/assets/other.js')).status, 404);

      const session = await admin.get('/session');
      assert.equal(session.status, 200);
      assert.ok(session.headers.get('content-security-policy').includes("default-src 'none'"));
      const { csrf, ...rest } = session.json;
      assert.deepEqual(rest, { version: 1, readOnly: false, refreshMs: 5000, stalledAfterMs: 60000, actor: ACTOR });
      assert.equal(csrf.header, 'x-outbox-csrf');
      assert.match(csrf.token, /^[A-Za-z0-9_-]{43}$/);
      const [cookie] = session.headers.getSetCookie();
      assert.ok(cookie.startsWith(`outbox_admin_csrf=${csrf.token};`), cookie);
      for (const attribute of ['Path=/admin/outbox', 'HttpOnly', 'SameSite=Strict']) {
        assert.ok(cookie.split('; ').includes(attribute), `${attribute} in ${cookie}`);
      }
      // The cookie held, the same token again and no new cookie.
      const again = await admin.get('/session');
      assert.equal(again.json.csrf.token, csrf.token);
      assert.deepEqual(again.headers.getSetCookie(), []);

      const overview = await admin.get('/overview');
      assert.equal(overview.status, 200);
      assert.deepEqual(overview.json.badges, []);
    });

    it('lists dead letters, refuses a redrive without the CSRF header, dry-runs and redrives with it, audited', async () => {
      const { admin } = await start();
      const ids = await deadLetters(3);
      const sorted = [...ids].sort();

      const listed = await admin.get('/events?status=dead');
      assert.equal(listed.status, 200);
      assert.deepEqual(listed.json.items.map((e) => e.id).sort(), sorted);
      for (const event of listed.json.items) {
        assert.equal(event.state, 'dead');
        assert.equal(event.topic, 'admin.doomed');
        assert.equal('payload' in event, false);
        assert.equal(typeof event.payloadBytes, 'number');
      }
      assert.equal(listed.json.nextCursor, null);
      assert.deepEqual((await admin.get('/overview')).json.badges, [{ kind: 'dead', count: 3 }]);

      const { token } = (await admin.get('/session')).json.csrf;
      const body = { selection: { ids } };
      // The cookie is held; without the header the mutation is refused, and nothing is read or written.
      assertError(await admin.post('/redrive', body), 403, /CSRF token/, 'redrive without x-outbox-csrf');
      assertError(
        await admin.post('/redrive', body, { 'x-outbox-csrf': 'A'.repeat(43) }),
        403,
        /does not match/,
        'redrive with another token',
      );
      assert.deepEqual(await auditRows(), []);

      const withToken = { 'x-outbox-csrf': token };
      const dry = await admin.post('/redrive', { ...body, dryRun: true }, withToken);
      assert.equal(dry.status, 200, dry.text);
      assert.deepEqual(
        { dryRun: dry.json.dryRun, matched: dry.json.matched, changed: dry.json.changed, auditId: dry.json.auditId },
        { dryRun: true, matched: 3, changed: 0, auditId: null },
      );
      for (const id of ids) assert.equal((await app.row(id)).status, 'dead');
      assert.deepEqual(await auditRows(), [], 'a dry run writes no audit row');

      const done = await admin.post('/redrive', body, withToken);
      assert.equal(done.status, 200, done.text);
      assert.deepEqual(
        { dryRun: done.json.dryRun, matched: done.json.matched, changed: done.json.changed, skipped: done.json.skipped },
        { dryRun: false, matched: 3, changed: 3, skipped: [] },
      );
      assert.match(done.json.auditId, UUID);
      for (const id of ids) assert.notEqual((await app.row(id)).status, 'dead');
      assert.deepEqual((await admin.get('/events?status=dead')).json.items, []);

      const trail = await admin.get('/audit');
      assert.equal(trail.status, 200);
      assert.equal(trail.json.nextCursor, null);
      assert.equal(trail.json.items.length, 1);
      const [entry] = trail.json.items;
      assert.deepEqual(
        {
          id: entry.id,
          actor: entry.actor,
          action: entry.action,
          selection: entry.selection,
          options: entry.options,
          matched: entry.matched,
          changed: entry.changed,
          skipped: entry.skipped,
          outcome: entry.outcome,
          error: entry.error,
        },
        {
          id: done.json.auditId,
          actor: ACTOR,
          action: 'redrive',
          selection: { ids },
          options: {},
          matched: 3,
          changed: 3,
          skipped: 0,
          outcome: 'done',
          error: null,
        },
      );
      assert.equal((await auditRows()).length, 1);
    });

    it('answers bad input 400 and an unknown event 404, as { statusCode, message }', async () => {
      const { admin } = await start();
      const [id] = await deadLetters(1);
      assertError(await admin.get('/events?colour=red'), 400, /^Invalid outbox query: unknown field "colour"/, 'colour');
      assertError(await admin.get('/events/not-a-uuid'), 400, /^Invalid outbox /, '/events/not-a-uuid');
      assertError(await admin.get('/events?status=lost'), 400, /^Invalid outbox /, 'status=lost');
      assertError(await admin.get('/events?createdAfter=yesterday'), 400, /^Invalid outbox /, 'createdAfter');
      assertError(await admin.get('/audit?cursor=x'), 400, /^Invalid outbox cursor/, 'audit cursor');
      const unknown = randomUUID();
      assertError(await admin.get(`/events/${unknown}`), 404, new RegExp(`No outbox event has the id ${unknown}`), '404');

      const { token } = (await admin.get('/session')).json.csrf;
      const withToken = { 'x-outbox-csrf': token };
      assertError(
        await admin.post('/redrive', { selection: { filter: { colour: 'red' } } }, withToken),
        400,
        /^Invalid outbox selection\.filter: unknown field "colour"/,
        'a filter with an unknown field',
      );
      assertError(
        await admin.post('/redrive', { selection: { ids: [id] }, force: true }, withToken),
        400,
        /^Invalid outbox body: unknown field "force"/,
        'a body with an unknown field',
      );
      assert.equal((await app.row(id)).status, 'dead');
      assert.deepEqual(await auditRows(), []);
      const event = await admin.get(`/events/${id}`);
      assert.equal(event.status, 200);
      assert.deepEqual({ id: event.json.id, state: event.json.state, payload: event.json.payload }, {
        id,
        state: 'dead',
        payload: { n: 0 },
      });
    });

    it('refuses every mutation with 403 in read-only mode, and gives no CSRF token', async () => {
      const { admin } = await start({ readOnly: true });
      const [id] = await deadLetters(1);
      const session = await admin.get('/session');
      assert.equal(session.status, 200);
      assert.equal(session.json.readOnly, true);
      assert.equal(session.json.csrf, null);
      assert.deepEqual(session.headers.getSetCookie(), []);
      for (const path of ['/redrive', '/discard', '/deliver-now']) {
        assertError(await admin.post(path, { selection: { ids: [id] } }), 403, /read-only/, `${path} read-only`);
      }
      assert.equal((await admin.get('/events?status=dead')).json.items.length, 1);
      assert.equal((await app.row(id)).status, 'dead');
      assert.deepEqual(await auditRows(), []);
    });
  });
}
