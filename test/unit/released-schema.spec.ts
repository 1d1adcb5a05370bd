import { dialectForType } from '../../lib/dialects/dialect-for-type';
import { outboxTable } from '../../lib/dialects/shared/outbox-table';
import { readFileSync } from 'node:fs';
import { createOutboxAdminMigrations } from '../../lib/schema/admin-migrations';
import { createOutboxInboxMigrations } from '../../lib/schema/inbox-migrations';
import { join } from 'node:path';

/**
 * Users have run these statements: a released migration must never change. The fixture holds the SQL
 * of every released schema version, per database, for the default table and for a custom table in a
 * PostgreSQL schema (written from the code of version 2's release). A new schema version adds its
 * own entry to each; an existing entry is never edited.
 */
const released = JSON.parse(readFileSync(join(__dirname, '../fixtures/released-schema.json'), 'utf8')) as Record<
  string,
  unknown
>;

describe('released schema versions', () => {
  const cases = ['postgres', 'mysql', 'sqlite'].flatMap((type) => [
    { key: `${type} outbox_event`, type, table: outboxTable('outbox_event') },
    {
      key: `${type} app.orders_outbox`,
      type,
      table: outboxTable('orders_outbox', type === 'postgres' ? 'app' : undefined),
    },
  ]);

  it.each(cases)('$key: every version builds the statements it was released with', ({ key, type, table }) => {
    const dialect = dialectForType(type);
    expect({
      v1: { up: dialect.schema.createSchema(table), down: dialect.schema.dropSchema(table) },
      v2: { up: dialect.schema.upgrade(2, table), down: dialect.schema.downgrade(2, table) },
      v3: { up: dialect.schema.upgrade(3, table), down: dialect.schema.downgrade(3, table) },
      v4: { up: dialect.schema.upgrade(4, table), down: dialect.schema.downgrade(4, table) },
      v5: { up: dialect.schema.upgrade(5, table), down: dialect.schema.downgrade(5, table) },
      v6: { up: dialect.schema.upgrade(6, table), down: dialect.schema.downgrade(6, table) },
      v7: { up: dialect.schema.upgrade(7, table), down: dialect.schema.downgrade(7, table) },
      v8: { up: dialect.schema.upgrade(8, table), down: dialect.schema.downgrade(8, table) },
      v9: { up: dialect.schema.upgrade(9, table), down: dialect.schema.downgrade(9, table) },
    }).toEqual(released[key]);
  });
});

/** The inbox table's released versions, held the same way (written from the code of its first release). */
const releasedInbox = JSON.parse(
  readFileSync(join(__dirname, '../fixtures/released-inbox-schema.json'), 'utf8'),
) as Record<string, unknown>;

describe('released inbox schema versions', () => {
  const cases = ['postgres', 'mysql', 'sqlite'].flatMap((type) => [
    { key: `${type} outbox_inbox`, type, table: outboxTable('outbox_inbox') },
    {
      key: `${type} app.billing_inbox`,
      type,
      table: outboxTable('billing_inbox', type === 'postgres' ? 'app' : undefined),
    },
  ]);

  it.each(cases)('$key: every version builds the statements it was released with', ({ key, type, table }) => {
    const dialect = dialectForType(type);
    expect({ v1: { up: dialect.inbox.create(table), down: dialect.inbox.drop(table) } }).toEqual(releasedInbox[key]);
  });

  it('keeps the names TypeORM recorded the migrations under', () => {
    expect({
      outbox_inbox: createOutboxInboxMigrations().map((m) => m.name),
      billing_inbox: createOutboxInboxMigrations('billing_inbox').map((m) => m.name),
    }).toEqual(releasedInbox.migrations);
  });
});

/** The admin page's audit table, held the same way (written from the code of its first release). */
const releasedAudit = JSON.parse(
  readFileSync(join(__dirname, '../fixtures/released-admin-schema.json'), 'utf8'),
) as Record<string, unknown>;

describe('released admin audit schema versions', () => {
  const cases = ['postgres', 'mysql', 'sqlite'].flatMap((type) => [
    { key: `${type} outbox_admin_audit`, type, table: outboxTable('outbox_admin_audit') },
    {
      key: `${type} app.billing_audit`,
      type,
      table: outboxTable('billing_audit', type === 'postgres' ? 'app' : undefined),
    },
  ]);

  it.each(cases)('$key: every version builds the statements it was released with', ({ key, type, table }) => {
    const dialect = dialectForType(type);
    expect({ v1: { up: dialect.audit.create(table), down: dialect.audit.drop(table) } }).toEqual(releasedAudit[key]);
  });

  it('keeps the names TypeORM recorded the migrations under', () => {
    expect({
      outbox_admin_audit: createOutboxAdminMigrations().map((m) => m.name),
      billing_audit: createOutboxAdminMigrations('billing_audit').map((m) => m.name),
    }).toEqual(releasedAudit.migrations);
  });
});
