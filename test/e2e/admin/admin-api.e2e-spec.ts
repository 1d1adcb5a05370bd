import { Injectable } from '@nestjs/common';
import { firstValueFrom, filter } from 'rxjs';
import {
  OutboxAdminModule,
  OutboxEvents,
  OutboxHandler,
  OutboxNonRetryableError,
  OutboxOperations,
  type OutboxAdminActionEvent,
  type OutboxMessage,
} from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { AdminClient, AdminGuard, adminTestApp, ADMIN_TOKEN as TOKEN } from '../../fixtures/admin-app';
import { createTestApp, emptyTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Sink {
  healed = false;
  @OutboxHandler('order.doomed')
  doomed(m: OutboxMessage<{ n: number }>) {
    if (!this.healed) throw new OutboxNonRetryableError(`order ${m.payload.n} refused by "warehouse-${m.payload.n}"`);
  }
}

async function deadLetters(app: TestApp, count: number, topic = 'order.doomed'): Promise<string[]> {
  const ids: string[] = [];
  await app.txHost.withTransaction(async () => {
    for (let n = 0; n < count; n++) ids.push((await app.outbox.publish(topic, { n })).id);
  });
  await app.worker.drain();
  return ids;
}

describe.each(backends())('the admin API on %s', (backend: BackendName) => {
  describe.each(['express', 'fastify'] as const)('over %s', (adapter) => {
    let app: TestApp;
    let admin: AdminClient;
    let anonymous: AdminClient;

    beforeAll(async () => {
      app = await adminTestApp(backend, { guards: [AdminGuard] }, { adapter, providers: [Sink] });
      admin = new AdminClient(`${app.url}/admin/outbox`, { authorization: TOKEN });
      anonymous = new AdminClient(`${app.url}/admin/outbox`);
    });
    afterAll(() => app?.dispose());
    beforeEach(async () => {
      await emptyTestApp(app);
      await app.raw.query(`DELETE FROM "${app.table}_audit"`);
      app.module.get(Sink).healed = false;
    });

    it('refuses every page and API call without the guard’s credentials, and writes nothing', async () => {
      const [id] = await deadLetters(app, 1);
      for (const path of ['', '/events', `/events/${id}`, '/failures', '/assets/admin.js']) {
        expect((await anonymous.request('GET', path)).status).toBe(403);
      }
      for (const path of ['/session', '/overview', '/events', `/events/${id}`, '/failure-groups', '/audit']) {
        expect((await anonymous.get(path)).status).toBe(403);
      }
      const post = await anonymous.request('POST', '/api/v1/redrive', { selection: { ids: [id] } });
      expect(post.status).toBe(403);
      const page = await admin.get(`/events/${id}`);
      expect(page.json!.state).toBe('dead');
    });

    it('serves the page on every view with a strict Content-Security-Policy', async () => {
      for (const path of [
        '',
        '/events',
        '/events/0190a000-0000-7000-8000-000000000000',
        '/failures',
        '/keys',
        '/audit',
      ]) {
        const page = await admin.request('GET', path);
        expect(page.status).toBe(200);
        expect(page.headers.get('content-type')).toMatch(/^text\/html/);
        expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
        expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
        expect(page.text).toContain('/admin/outbox/assets/admin.js');
      }
      const script = await admin.request('GET', '/assets/admin.js');
      expect(script.headers.get('content-type')).toMatch(/^text\/javascript/);
      expect(script.text.length).toBeGreaterThan(1000);
      expect((await admin.request('GET', '/assets/..%2Fadmin-options.ts')).status).toBe(404);
    });

    it('gives the overview: counts, a badge only for what is wrong, one shared stats read for every page', async () => {
      // The first overview of this app: its stats are read now, with the dead letters in.
      await deadLetters(app, 3);
      const first = await admin.get('/overview');
      expect(first.json!.stats).toMatchObject({ dead: 3, due: 0, blockedKeys: 0 });
      expect(first.json!.badges).toEqual([{ kind: 'dead', count: 3 }]);
      const stats = jest.spyOn(app.module.get(OutboxOperations), 'stats');
      const pages = await Promise.all(Array.from({ length: 10 }, () => admin.get('/overview')));
      // Within refreshMs every page gets the same read (at most one new one, if the period ended meanwhile).
      expect(stats.mock.calls.length).toBeLessThanOrEqual(1);
      expect(new Set(pages.map((p) => (p.json!.stats as { at: string }).at)).size).toBeLessThanOrEqual(2);
      stats.mockRestore();
    });

    it('lists events by a filter from the query, refuses unknown fields and malformed input with 400', async () => {
      const ids = await deadLetters(app, 3);
      await app.txHost.withTransaction(() => app.outbox.publish('order.later', { n: 9 }, { delayMs: 3_600_000 }));
      const dead = await admin.get('/events?status=dead&order=oldest');
      expect(dead.status).toBe(200);
      const items = dead.json!.items as Array<Record<string, unknown>>;
      expect(items.map((e) => e.id)).toEqual(ids);
      expect(items[0]).not.toHaveProperty('payload');
      expect(items[0].payloadBytes).toBe(JSON.stringify({ n: 0 }).length);
      const scheduled = await admin.get('/events?status=scheduled,dead&topic=order.*&limit=2');
      expect((scheduled.json!.items as unknown[]).length).toBe(2);
      expect(scheduled.json!.nextCursor).toEqual(expect.any(String));
      for (const bad of [
        '/events?colour=red',
        '/events?status=lost',
        '/events?id=not-a-uuid',
        '/events?cursor=nope',
        '/events?createdAfter=yesterday',
        '/events?limit=9999',
        '/events?status=dead&status=due',
        '/events/not-a-uuid',
        '/audit?cursor=x',
        '/blocked-keys?limit=0',
        '/failure-groups?status=dead',
      ]) {
        const answer = await admin.get(bad);
        expect([bad, answer.status]).toEqual([bad, 400]);
        expect(answer.json!.message).toMatch(/^Invalid outbox /);
      }
      expect((await admin.get('/events/0190a000-0000-7000-8000-000000000000')).status).toBe(404);
    });

    it('redrives a dead letter after a dry run, writes the mutation to the audit trail and emits it', async () => {
      const [id] = await deadLetters(app, 1);
      const emitted = firstValueFrom(
        app.module
          .get(OutboxEvents)
          .events$.pipe(filter((e): e is OutboxAdminActionEvent => e.type === 'admin.action')),
      );
      const dry = await admin.post('/redrive', { selection: { ids: [id] }, dryRun: true });
      expect(dry.json).toMatchObject({ dryRun: true, matched: 1, changed: 0, auditId: null });
      expect((await admin.get(`/events/${id}`)).json!.state).toBe('dead');
      const done = await admin.post('/redrive', { selection: { ids: [id] } });
      expect(done.status).toBe(200);
      expect(done.json).toMatchObject({ dryRun: false, matched: 1, changed: 1 });
      expect(done.json!.auditId).toMatch(/^[0-9a-f-]{36}$/);
      expect(await emitted).toMatchObject({ actor: 'ops@example.com', action: 'redrive', changed: 1 });
      app.module.get(Sink).healed = true;
      await app.worker.drain();
      expect((await admin.get(`/events/${id}`)).json!.state).toBe('delivered');
      const trail = await admin.get('/audit');
      expect(trail.json!.items).toEqual([
        expect.objectContaining({
          id: done.json!.auditId,
          actor: 'ops@example.com',
          action: 'redrive',
          selection: { ids: [id] },
          options: {},
          matched: 1,
          changed: 1,
          skipped: 0,
          outcome: 'done',
        }),
      ]);
    });

    it('applies an action to everything a filter matches and to a failure group', async () => {
      await deadLetters(app, 4);
      const filterDry = await admin.post('/discard', {
        selection: { filter: { status: 'dead', createdAfter: '2000-01-01T00:00:00Z' } },
        dryRun: true,
      });
      expect(filterDry.json).toMatchObject({ matched: 4, changed: 0 });
      const groups = await admin.get('/failure-groups');
      const [group] = groups.json as unknown as Array<{ topic: string; fingerprint: string; count: number }>;
      expect(group.count).toBe(4);
      const redriven = await admin.post('/redrive', {
        selection: { group: { topic: group.topic, fingerprint: group.fingerprint } },
      });
      expect(redriven.json).toMatchObject({ matched: 4, changed: 4 });
      expect((await admin.get('/events?status=dead')).json!.items).toEqual([]);
    });

    it('refuses a mutation without the CSRF token, with another site’s token, or from another origin', async () => {
      const [id] = await deadLetters(app, 1);
      const body = { selection: { ids: [id] } };
      const bare = await admin.request('POST', '/api/v1/redrive', body);
      expect(bare.status).toBe(403);
      expect(bare.json!.message).toMatch(/CSRF token/);
      await admin.get('/session');
      const forged = await admin.request('POST', '/api/v1/redrive', body, { 'x-outbox-csrf': 'A'.repeat(43) });
      expect(forged.status).toBe(403);
      const session = (await admin.get('/session')).json!.csrf as { header: string; token: string };
      const crossSite = await admin.request('POST', '/api/v1/redrive', body, {
        [session.header]: session.token,
        origin: 'https://evil.example',
      });
      expect(crossSite.status).toBe(403);
      expect((await admin.get(`/events/${id}`)).json!.state).toBe('dead');
      expect((await admin.get('/audit')).json!.items).toEqual([]);
    });

    it('refuses bad mutation bodies with 400 and writes neither the events nor the audit trail', async () => {
      const [id] = await deadLetters(app, 1);
      const tooMany = Array.from({ length: 1001 }, () => id);
      for (const body of [
        {},
        { selection: { ids: [id] }, force: true },
        { selection: { ids: [id], filter: {} } },
        { selection: { filter: { colour: 'red' } } },
        { selection: { filter: { createdAfter: 'soon' } } },
        { selection: { ids: tooMany } },
        { selection: { ids: ['x'] } },
        { selection: { ids: [id] }, dryRun: 'yes' },
        { selection: { group: { topic: 'order.doomed', fingerprint: 'zz' } } },
      ]) {
        const answer = await admin.post('/redrive', body);
        expect([JSON.stringify(body).slice(0, 80), answer.status]).toEqual([JSON.stringify(body).slice(0, 80), 400]);
      }
      expect((await admin.get(`/events/${id}`)).json!.state).toBe('dead');
      expect((await admin.get('/audit')).json!.items).toEqual([]);
    });
  });
});

describe('the admin page declared without a guard', () => {
  it('refuses to start, saying why, unless told unsafeAllowAnonymous', () => {
    expect(() => OutboxAdminModule.forRoot({ path: 'admin' })).toThrow(/needs a guard/);
    expect(() => OutboxAdminModule.forRoot({ path: 'admin', unsafeAllowAnonymous: true })).not.toThrow();
    expect(() => OutboxAdminModule.forRoot({ guards: [AdminGuard], unsafeAllowAnonymous: true })).toThrow(
      /unsafeAllowAnonymous/,
    );
  });

  it('names the audit migration when the table is missing', async () => {
    const backend = backends()[0];
    await expect(
      createTestApp({ backend, http: true, imports: [OutboxAdminModule.forRoot({ guards: [AdminGuard] })] }),
    ).rejects.toThrow(/OutboxAdminMigrations/);
  });
});

describe('the admin page in read-only mode', () => {
  it('refuses every mutation on the server with 403 and gives no CSRF token', async () => {
    const backend = backends()[0];
    const app = await adminTestApp(backend, { guards: [AdminGuard], readOnly: true }, { providers: [Sink] });
    try {
      const admin = new AdminClient(`${app.url}/admin/outbox`, { authorization: TOKEN });
      const [id] = await deadLetters(app, 1);
      const session = await admin.get('/session');
      expect(session.json).toMatchObject({ readOnly: true, csrf: null });
      for (const path of ['/redrive', '/discard', '/deliver-now']) {
        const answer = await admin.post(path, { selection: { ids: [id] } });
        expect(answer.status).toBe(403);
        expect(answer.json!.message).toMatch(/read-only/);
      }
      expect((await admin.get(`/events/${id}`)).json!.state).toBe('dead');
      expect((await admin.get('/audit')).json!.items).toEqual([]);
    } finally {
      await app.dispose();
    }
  });
});
