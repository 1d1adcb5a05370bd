import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Injectable } from '@nestjs/common';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { OutboxHandler, OutboxNonRetryableError, OutboxOperations, type OutboxMessage } from '../../../lib';
import { AdminGuard, adminTestApp, ADMIN_TOKEN as TOKEN } from '../../fixtures/admin-app';
import { backends, type BackendName } from '../../fixtures/backends';
import { chromiumAvailable, launchChromium } from '../../fixtures/browser';
import type { TestApp } from '../../fixtures/test-app';

/**
 * The admin page in a real browser (headless Chromium), used as a person would: elements found by their
 * role and accessible name. One browser for the file and one seeded app per database and HTTP adapter.
 */

/** Markup an event carries: it must show as text, and never run. */
const SCRIPT = '<script>window.__injected = 1</script>';
const IMAGE = '"><img src=x onerror="window.__injected = 2">';

@Injectable()
class Shop {
  healed = false;
  @OutboxHandler('order.placed')
  placed() {}
  @OutboxHandler('order.doomed')
  doomed(m: OutboxMessage<{ n: number }>) {
    if (!this.healed) throw new OutboxNonRetryableError(`order ${m.payload.n} refused: ${IMAGE} ${SCRIPT}`);
  }
  @OutboxHandler('stock.reserve')
  reserve() {
    if (!this.healed) throw new OutboxNonRetryableError('warehouse closed');
  }
}

/** Delivered orders, dead letters carrying markup, a delayed event, and a key blocked behind its dead head. */
async function seed(app: TestApp): Promise<{ dead: string[]; blockedHead: string }> {
  const publish = (topic: string, payload: unknown, options = {}) =>
    app.txHost.withTransaction(async () => (await app.outbox.publish(topic, payload, options)).id);
  for (let n = 0; n < 5; n++) await publish('order.placed', { n });
  const dead: string[] = [];
  for (let n = 0; n < 3; n++) dead.push(await publish('order.doomed', { n, note: SCRIPT, html: IMAGE }));
  await publish('order.placed', { n: 99 }, { delayMs: 3_600_000 });
  const blockedHead = await publish('stock.reserve', { sku: 'sku-1', n: 1 }, { key: 'sku-1' });
  await publish('stock.reserve', { sku: 'sku-1', n: 2 }, { key: 'sku-1' });
  await app.worker.drain();
  return { dead, blockedHead };
}

const browserTests = chromiumAvailable() ? describe : describe.skip;

browserTests('the admin page in Chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  });
  afterAll(() => browser?.close());

  describe.each(backends())('on %s', (backend: BackendName) => {
    describe.each(['express', 'fastify'] as const)('over %s', (adapter) => {
      let app: TestApp;
      let context: BrowserContext;
      let page: Page;
      let base: string;
      let seeded: { dead: string[]; blockedHead: string };
      /** Screenshots for the README, from one run. */
      const screenshots = adapter === 'express' && backend === backends()[0] && process.env.OUTBOX_ADMIN_SCREENSHOTS;

      beforeAll(async () => {
        app = await adminTestApp(
          backend,
          { guards: [AdminGuard], refreshMs: 1_000 },
          { adapter, providers: [Shop], outbox: { ordering: [{ topic: 'stock.*', deadHead: 'block' }] } },
        );
        base = `${app.url}/admin/outbox`;
        seeded = await seed(app);
        context = await browser.newContext({
          extraHTTPHeaders: { authorization: TOKEN },
          viewport: { width: 1280, height: 900 },
        });
        page = await context.newPage();
        // Any script the page did not ship, or a CSP violation, shows up here.
        page.on('pageerror', (error) => {
          throw error;
        });
      });
      afterAll(async () => {
        await context?.close();
        await app?.dispose();
      });

      it('opens the overview on the seeded outbox and reads its counts and badges', async () => {
        const stats = await app.module.get(OutboxOperations).stats();
        await page.goto(base);
        await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
        const counts = page.getByRole('table', { name: 'Counts by state' });
        for (const [name, value] of [
          ['Dead', stats.dead],
          ['Scheduled', stats.scheduled],
          ['Delivered', stats.delivered],
        ] as const) {
          const row = counts.getByRole('row', { name: new RegExp(`^${name}`) });
          expect(await row.getByRole('cell').first().textContent()).toContain(String(value));
        }
        expect(stats.dead).toBe(4);
        await page.getByRole('link', { name: /4 dead letters?/ }).waitFor();
        await page
          .getByText(/1 blocked key/)
          .first()
          .waitFor();
        if (screenshots) await shoot(page, 'admin-overview.png');
      });

      it('filters to dead letters (the filter in the URL), opens one and reads its error and attempts as text', async () => {
        await page.getByRole('link', { name: 'Events', exact: true }).click();
        await page.getByRole('heading', { level: 1, name: 'Events' }).waitFor();
        await page.getByLabel('State').selectOption('dead');
        await page.getByRole('button', { name: 'Apply' }).click();
        await page.waitForURL(/status=dead/);
        const [id] = seeded.dead;
        const link = page.getByRole('link', { name: new RegExp(id) });
        await link.waitFor();
        expect(await page.getByRole('row').count()).toBe(1 + 4); // the header and the four dead letters
        await link.click();
        await page.getByRole('heading', { level: 1, name: `Event ${id}` }).waitFor();
        await page.waitForURL(new RegExp(`/events/${id}$`));
        // The markup in the payload and in the error is shown as it is, and nothing of it ran.
        expect(await page.getByText(SCRIPT).count()).toBeGreaterThan(0);
        expect(await page.getByText(IMAGE, { exact: false }).count()).toBeGreaterThan(0);
        expect(await page.locator('img').count()).toBe(0);
        expect(await page.evaluate('window.__injected')).toBeUndefined();
        const attempts = page.getByRole('table', { name: /Attempts/ });
        expect(await attempts.getByRole('row').count()).toBeGreaterThan(1);
        expect(await attempts.textContent()).toContain('dead');
        if (screenshots) await shoot(page, 'admin-event.png');
      });

      it('redrives that dead letter after its dry run and confirmation, and watches it become delivered', async () => {
        app.module.get(Shop).healed = true;
        await page.getByRole('button', { name: 'Redrive', exact: true }).click();
        const dialog = page.getByRole('dialog');
        await dialog.waitFor();
        expect(await dialog.textContent()).toMatch(/\b1\b/);
        await dialog.getByRole('button', { name: 'Confirm' }).click();
        await page
          .getByRole('status')
          .filter({ hasText: /redriven/i })
          .waitFor();
        await app.worker.drain();
        await page.reload();
        await page.getByText('delivered', { exact: true }).first().waitFor();
        const [id] = seeded.dead;
        expect((await app.module.get(OutboxOperations).getOrFail(id)).state).toBe('delivered');
      });

      it('redrives a failure group after a dry run', async () => {
        await page.getByRole('link', { name: 'Failure groups' }).click();
        await page.getByRole('heading', { level: 1, name: 'Failure groups' }).waitFor();
        const row = page.getByRole('row').filter({ hasText: 'order.doomed' });
        await row.getByRole('button', { name: 'Redrive group' }).click();
        const dialog = page.getByRole('dialog');
        await dialog.waitFor();
        expect(await dialog.textContent()).toMatch(/\b2\b/);
        await dialog.getByRole('button', { name: 'Confirm' }).click();
        await page
          .getByRole('status')
          .filter({ hasText: /redriven/i })
          .waitFor();
        const left = await app.module.get(OutboxOperations).find({ status: 'dead', topic: 'order.doomed' });
        expect(left.items).toEqual([]);
      });

      it('unblocks a blocked key by discarding its head', async () => {
        await page.getByRole('link', { name: 'Blocked keys' }).click();
        await page.getByRole('heading', { level: 1, name: 'Blocked keys' }).waitFor();
        const row = page.getByRole('row').filter({ hasText: 'sku-1' });
        await row.getByRole('button', { name: 'Discard head' }).click();
        const dialog = page.getByRole('dialog');
        await dialog.getByRole('button', { name: 'Confirm' }).click();
        await page
          .getByRole('status')
          .filter({ hasText: /discarded/i })
          .waitFor();
        expect(await app.module.get(OutboxOperations).blockedKeys()).toEqual([]);
        expect(await app.module.get(OutboxOperations).get(seeded.blockedHead)).toBeNull();
      });

      it('shows each mutation in the audit trail, with who made it', async () => {
        await page.getByRole('link', { name: 'Audit' }).click();
        await page.getByRole('heading', { level: 1, name: 'Audit trail' }).waitFor();
        const rows = page.getByRole('row').filter({ hasText: 'ops@example.com' });
        await rows.first().waitFor();
        expect(await rows.count()).toBe(3);
        const text = await page.getByRole('table').first().textContent();
        expect(text).toContain('redrive');
        expect(text).toContain('discard');
      });

      it('refuses a POST without the CSRF token, from the page’s own origin', async () => {
        const status = await page.evaluate(
          (url) =>
            fetch(url, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ selection: { ids: [] }, dryRun: true }),
            }).then((r) => r.status),
          `${base}/api/v1/redrive`,
        );
        expect(status).toBe(403);
      });

      it('refuses every page and API call without the guard’s credentials', async () => {
        const stranger = await browser.newContext();
        try {
          const other = await stranger.newPage();
          for (const path of ['', '/events', '/api/v1/overview', '/assets/admin.js']) {
            expect((await other.goto(`${base}${path}`))?.status()).toBe(403);
          }
        } finally {
          await stranger.close();
        }
      });

      it('is usable at a phone’s width and by keyboard, and does not shift as it refreshes', async () => {
        const phone = await browser.newContext({
          extraHTTPHeaders: { authorization: TOKEN },
          viewport: { width: 375, height: 740 },
        });
        try {
          const small = await phone.newPage();
          await small.goto(base);
          await small.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
          // Tables scroll inside their own box: the page itself is no wider than the screen.
          expect(await small.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(375);
          // Two refreshes of the overview, then the layout shifts they caused (the page's own script is the
          // browser's: these run there, as text).
          await small.evaluate(`window.__shift = 0;
            new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__shift += e.value; })
              .observe({ type: 'layout-shift', buffered: false });`);
          for (let n = 0; n < 2; n++) await small.waitForResponse((r) => r.url().endsWith('/api/v1/overview'));
          expect(await small.evaluate('window.__shift')).toBeLessThan(0.01);
          // By keyboard: the navigation's links are reached with Tab and followed with Enter.
          for (let n = 0; n < 10; n++) {
            await small.keyboard.press('Tab');
            const name = await small.evaluate('document.activeElement?.textContent?.trim()');
            if (name === 'Events') break;
          }
          await small.keyboard.press('Enter');
          await small.getByRole('heading', { level: 1, name: 'Events' }).waitFor();
        } finally {
          await phone.close();
        }
      });
    });
  });

  describe('read-only', () => {
    it('shows no action, and the server refuses them', async () => {
      const backend = backends()[0];
      const app = await adminTestApp(backend, { guards: [AdminGuard], readOnly: true }, { providers: [Shop] });
      const context = await browser.newContext({ extraHTTPHeaders: { authorization: TOKEN } });
      try {
        const { dead } = await seed(app);
        const page = await context.newPage();
        await page.goto(`${app.url}/admin/outbox/events/${dead[0]}`);
        await page.getByRole('heading', { level: 1, name: `Event ${dead[0]}` }).waitFor();
        await page.getByText('Read-only').first().waitFor();
        expect(await page.getByRole('button', { name: 'Redrive' }).count()).toBe(0);
        const status = await page.evaluate(
          (url) =>
            fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).then(
              (r) => r.status,
            ),
          `${app.url}/admin/outbox/api/v1/redrive`,
        );
        expect(status).toBe(403);
      } finally {
        await context.close();
        await app.dispose();
      }
    });
  });
});

/** A screenshot for the README (OUTBOX_ADMIN_SCREENSHOTS=1 writes docs/images/). */
async function shoot(page: Page, name: string): Promise<void> {
  const dir = join(__dirname, '../../../docs/images');
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: join(dir, name), fullPage: false });
}
