import { execFileSync } from 'node:child_process';
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { backends, uniqueName } from '../../fixtures/backends';
import { postgresUrl } from '../../fixtures/env';

/**
 * The testing recipe of docs/testing.md, verbatim, against the app of docs/quick-start.md: the marked
 * files of both pages are pasted as a CommonJS app would have them, the module block added to the
 * generated app.module.ts (compat/fresh-app/extract.mjs, the extractor CI's fresh-app check uses), and
 * the recipe's own describe block runs here, once on SQLite exactly as pasted, and once on PostgreSQL
 * with the change the quick start gives for it. `nestjs-typeorm-outbox` resolves to lib/ (jest.config.js).
 */
const root = join(__dirname, '../../..');

function pasteDocsApp(): string {
  const dir = join(root, '.tmp', uniqueName('readme-app'));
  // What `nest new` generated: the quick start adds to its app.module.ts and keeps the rest.
  cpSync(join(root, 'test/fixtures/nest-new/src'), join(dir, 'src'), { recursive: true });
  // The quick start's files, then the testing page's recipe, as a user pastes them.
  for (const page of ['docs/quick-start.md', 'docs/testing.md']) {
    execFileSync(process.execPath, [join(root, 'compat/fresh-app/extract.mjs'), 'files', join(root, page), dir, 'cjs']);
  }
  return dir;
}

/** The quick start: "On PostgreSQL, replace `type`, `database` and `enableWAL` with `type: 'postgres', url: …`". */
function switchToPostgres(dir: string): void {
  const file = join(dir, 'src/app.module.ts');
  const sqlite = /type: 'better-sqlite3',\s*database: 'app\.sqlite',\s*enableWAL: true,/;
  const source = readFileSync(file, 'utf8');
  if (!sqlite.test(source)) {
    throw new Error(`the quick start's TypeOrmModule options changed: ${sqlite} no longer matches src/app.module.ts`);
  }
  writeFileSync(file, source.replace(sqlite, "type: 'postgres', url: process.env.DATABASE_URL,"));
}

/** Another handler of `order.placed`, registered in the quick start's OrdersModule. */
function addSecondHandler(dir: string): void {
  writeFileSync(
    join(dir, 'src/orders/order-mailer.handler.ts'),
    [
      "import { Injectable } from '@nestjs/common';",
      "import { OutboxHandler } from 'nestjs-typeorm-outbox';",
      '',
      '@Injectable()',
      'export class OrderMailerHandler {',
      "  @OutboxHandler('order.placed')",
      '  onOrderPlaced(): void {}',
      '}',
      '',
    ].join('\n'),
  );
  const file = join(dir, 'src/orders/orders.module.ts');
  const providers = 'providers: [OrdersService, OrderPlacedHandler]';
  const source = readFileSync(file, 'utf8');
  if (!source.includes(providers)) {
    throw new Error(`the quick start's OrdersModule changed: "${providers}" no longer in src/orders/orders.module.ts`);
  }
  writeFileSync(
    file,
    "import { OrderMailerHandler } from './order-mailer.handler';\n" +
      source.replace(providers, 'providers: [OrdersService, OrderPlacedHandler, OrderMailerHandler]'),
  );
}

interface Variant {
  title: string;
  setUp(dir: string): Promise<void>;
  tearDown(): Promise<void>;
}

const variants: Variant[] = [
  {
    title: 'SQLite, as pasted',
    // The quick start's database is `app.sqlite` in the working directory: the pasted app's folder.
    setUp: (dir) => {
      process.chdir(dir);
      return Promise.resolve();
    },
    tearDown: () => {
      process.chdir(root);
      return Promise.resolve();
    },
  },
  {
    title: 'SQLite, with a second handler of the same topic',
    // A mailer added next month listens to order.placed too: the recipe must still pass unchanged.
    setUp: (dir) => {
      addSecondHandler(dir);
      process.chdir(dir);
      return Promise.resolve();
    },
    tearDown: () => {
      process.chdir(root);
      return Promise.resolve();
    },
  },
];

if (backends().includes('postgres')) {
  const database = uniqueName('readme');
  const admin = () => new Client({ connectionString: postgresUrl() });
  variants.push({
    title: 'PostgreSQL, with the quick start’s change for it',
    setUp: async (dir) => {
      switchToPostgres(dir);
      const client = admin();
      await client.connect();
      await client.query(`CREATE DATABASE ${database}`);
      await client.end();
      const url = new URL(postgresUrl());
      url.pathname = `/${database}`;
      process.env.DATABASE_URL = url.toString();
    },
    tearDown: async () => {
      delete process.env.DATABASE_URL;
      const client = admin();
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${database}`);
      await client.end();
    },
  });
}

describe.each(variants)('the testing page’s recipe on $title', (variant) => {
  const dir = pasteDocsApp();
  beforeAll(() => variant.setUp(dir));
  // Runs after the recipe's own afterAll has closed its module.
  afterAll(async () => {
    await variant.tearDown();
    rmSync(dir, { recursive: true, force: true });
  });

  // The recipe registers its describe block here, inside this one; a module registry of its own per
  // variant, so each gets its own AppModule.
  jest.isolateModules(() => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the recipe's describe must register now, in this module registry: an import() would come too late
    require(join(dir, 'test/orders.e2e-spec.ts'));
  });
});
