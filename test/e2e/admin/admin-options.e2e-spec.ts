import { type ExecutionContext, Injectable, Module } from '@nestjs/common';
import {
  OutboxAdminModule,
  OutboxHandler,
  OutboxNonRetryableError,
  type OutboxEventDetails,
  type OutboxMessage,
} from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { AdminClient, adminTestApp } from '../../fixtures/admin-app';
import { createTestApp, emptyTestApp, type TestApp } from '../../fixtures/test-app';
import { createOutboxAdminMigrations, createOutboxMigrations } from '../../../lib';
import { uniqueName } from '../../fixtures/backends';

@Injectable()
class Sink {
  healed = false;
  @OutboxHandler('order.doomed')
  doomed(m: OutboxMessage<{ n: number }>) {
    if (!this.healed) throw new OutboxNonRetryableError(`order ${m.payload.n} refused`);
  }
}

async function publish(
  app: TestApp,
  topic: string,
  payload: unknown,
  options: { key?: string; delayMs?: number } = {},
) {
  return app.txHost.withTransaction(async () => (await app.outbox.publish(topic, payload, options)).id);
}

/** `canActivate` as a function: the header `x-admin: yes` lets a request through, as `ops`. */
const canActivate = (context: ExecutionContext) => {
  const request = context.switchToHttp().getRequest<{ headers: Record<string, string>; user?: unknown }>();
  request.user = { username: 'ops' };
  return request.headers['x-admin'] === 'yes';
};

/** What of an event leaves the server: the payload's `card` masked, one header kept. */
const redact = (event: OutboxEventDetails) => ({
  payload: { ...(event.payload as Record<string, unknown>), card: '****' },
  headers: { tenant: event.headers.tenant ?? '' },
});

describe.each(backends())('the admin page’s options on %s', (backend: BackendName) => {
  let app: TestApp;
  let admin: AdminClient;

  beforeAll(async () => {
    app = await adminTestApp(
      backend,
      { path: 'ops/outbox', canActivate, redact, maxPayloadBytes: 300 },
      {
        globalPrefix: 'api',
        providers: [Sink],
        outbox: { ordering: [{ topic: 'order.*', deadHead: 'block' }] },
      },
    );
    admin = new AdminClient(`${app.url}/api/ops/outbox`, { 'x-admin': 'yes' });
  });
  afterAll(() => app?.dispose());
  beforeEach(async () => {
    await emptyTestApp(app);
    await app.raw.query(`DELETE FROM "${app.table}_audit"`);
    app.module.get(Sink).healed = false;
  });

  it('serves under the app’s global prefix, with canActivate as its guard and the CSRF cookie on its path', async () => {
    expect((await new AdminClient(`${app.url}/api/ops/outbox`).get('/session')).status).toBe(403);
    const page = await admin.request('GET', '/events');
    expect(page.status).toBe(200);
    expect(page.text).toContain('/api/ops/outbox/assets/admin.js');
    const session = await admin.get('/session');
    expect(session.json).toMatchObject({ readOnly: false, actor: 'ops', refreshMs: 5000 });
    expect(session.headers.get('set-cookie')).toMatch(/; Path=\/api\/ops\/outbox; HttpOnly; SameSite=Strict$/);
  });

  it('sends an event’s payload and headers as redact lets them out, cut above maxPayloadBytes', async () => {
    const small = await app.txHost.withTransaction(
      async () =>
        (await app.outbox.publish('order.placed', { card: '4242', n: 1 }, { headers: { tenant: 't1', token: 's' } }))
          .id,
    );
    const shown = (await admin.get(`/events/${small}`)).json!;
    expect(shown).toMatchObject({
      payload: { card: '****', n: 1 },
      headers: { tenant: 't1' },
      payloadTruncated: false,
    });
    const big = await publish(app, 'order.big', { card: '4242', text: 'x'.repeat(1_000) });
    const cut = (await admin.get(`/events/${big}`)).json!;
    expect(cut).toMatchObject({ payload: null, payloadTruncated: true });
    expect(cut.payloadBytes).toBeGreaterThan(1_000);
    expect(String(cut.payloadPreview)).toHaveLength(300);
    expect(String(cut.payloadPreview)).toContain('"card":"****"');
  });

  it('shows a key’s place and unblocks a blocked key by redriving its head', async () => {
    const head = await publish(app, 'order.doomed', { n: 1 }, { key: 'k1' });
    const behind = await publish(app, 'order.doomed', { n: 2 }, { key: 'k1' });
    await app.worker.drain();
    const keys = (await admin.get('/blocked-keys')).json as unknown as Array<{ key: string; headId: string }>;
    expect(keys).toEqual([expect.objectContaining({ key: 'k1', headId: head, waiting: 1 })]);
    const detail = (await admin.get(`/events/${behind}`)).json!;
    expect(detail.keyEvents).toEqual([
      expect.objectContaining({ id: head, state: 'dead' }),
      expect.objectContaining({ id: behind, state: 'waiting' }),
    ]);
    app.module.get(Sink).healed = true;
    expect((await admin.post('/redrive', { selection: { ids: [head] } })).json).toMatchObject({ changed: 1 });
    await app.worker.drain();
    expect((await admin.get('/blocked-keys')).json).toEqual([]);
    expect((await admin.get(`/events/${behind}`)).json!.state).toBe('delivered');
  });

  it('delivers a delayed event now, and discards a dead letter, each in the audit trail with its actor', async () => {
    const later = await publish(app, 'order.placed', { n: 1 }, { delayMs: 3_600_000 });
    const dead = await publish(app, 'order.doomed', { n: 2 });
    await app.worker.drain();
    expect((await admin.post('/deliver-now', { selection: { ids: [later] } })).json).toMatchObject({ changed: 1 });
    expect((await admin.get(`/events/${later}`)).json!.state).toBe('due');
    expect((await admin.post('/discard', { selection: { ids: [dead] } })).json).toMatchObject({ changed: 1 });
    expect((await admin.get(`/events/${dead}`)).status).toBe(404);
    const trail = (await admin.get('/audit?limit=1')).json!;
    expect(trail.items).toEqual([expect.objectContaining({ action: 'discard', actor: 'ops', changed: 1 })]);
    const older = (await admin.get(`/audit?limit=1&cursor=${String(trail.nextCursor)}`)).json!;
    expect(older.items).toEqual([expect.objectContaining({ action: 'deliverNow', actor: 'ops', changed: 1 })]);
    expect(older.nextCursor).toBeNull();
  });

  it('runs no mutation it cannot record, and records one that failed', async () => {
    const dead = await publish(app, 'order.doomed', { n: 1 });
    await app.worker.drain();
    // The audit trail unreachable: the redrive does not run.
    await app.raw.query(`ALTER TABLE "${app.table}_audit" RENAME TO "${app.table}_audit_away"`);
    try {
      expect((await admin.post('/redrive', { selection: { ids: [dead] } })).status).toBe(500);
    } finally {
      await app.raw.query(`ALTER TABLE "${app.table}_audit_away" RENAME TO "${app.table}_audit"`);
    }
    expect((await admin.get(`/events/${dead}`)).json!.state).toBe('dead');
    expect((await admin.get('/audit')).json!.items).toEqual([]);
    // The outbox table unreachable during the redrive: its row says it failed, and why.
    await app.raw.query(`ALTER TABLE "${app.table}" RENAME TO "${app.table}_away"`);
    try {
      expect((await admin.post('/redrive', { selection: { ids: [dead] } })).status).toBe(500);
    } finally {
      await app.raw.query(`ALTER TABLE "${app.table}_away" RENAME TO "${app.table}"`);
    }
    const [row] = (await admin.get('/audit')).json!.items as Array<Record<string, unknown>>;
    expect(row).toMatchObject({ action: 'redrive', outcome: 'failed', changed: null });
    expect(String(row.error)).toMatch(new RegExp(app.table));
    expect((await admin.get(`/events/${dead}`)).json!.state).toBe('dead');
  });
});

@Module({})
class SettingsModule {}

describe('OutboxAdminModule.forRootAsync', () => {
  it('takes its path and guards beside the factory and the rest from it', async () => {
    const backend = backends()[0];
    const table = uniqueName();
    const app = await createTestApp({
      backend,
      table,
      http: true,
      providers: [Sink],
      extraTypeOrm: {
        migrations: [...createOutboxMigrations(table), ...createOutboxAdminMigrations(`${table}_audit`)],
      },
      imports: [
        OutboxAdminModule.forRootAsync({
          path: 'admin/async',
          canActivate: () => true,
          imports: [SettingsModule],
          useFactory: () => ({ readOnly: true, auditTableName: `${table}_audit`, refreshMs: 2_000 }),
        }),
      ],
    });
    try {
      const admin = new AdminClient(`${app.url}/admin/async`);
      expect((await admin.get('/session')).json).toMatchObject({ readOnly: true, refreshMs: 2_000, csrf: null });
      expect((await admin.post('/redrive', { selection: { ids: [] } })).status).toBe(403);
    } finally {
      await app.dispose();
    }
  });

  it('refuses a factory’s guards (they shape the routes, so they are given beside it) and a missing guard', () => {
    expect(() => OutboxAdminModule.forRootAsync({ useFactory: () => ({}) })).toThrow(/needs a guard/);
    expect(() => OutboxAdminModule.forRoot({ unsafeAllowAnonymous: true, path: '../etc' })).toThrow(/admin.path/);
    expect(() => OutboxAdminModule.forRoot({ unsafeAllowAnonymous: true, refreshMs: 10 })).toThrow(/admin.refreshMs/);
    expect(() => OutboxAdminModule.forRoot({ unsafeAllowAnonymous: true, colour: 'red' } as never)).toThrow(/colour/);
  });
});
