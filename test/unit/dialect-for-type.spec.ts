import type { DataSource } from 'typeorm';
import { OutboxConfigurationError } from '../../lib';
import { dialectForType, isSqlite } from '../../lib/dialects/dialect-for-type';

describe('dialectForType', () => {
  it.each([
    ['postgres', 'postgres'],
    ['mysql', 'mysql'],
    ['mariadb', 'mysql'],
    ['sqlite', 'sqlite'],
    ['better-sqlite3', 'sqlite'],
  ])('maps TypeORM type %s to the %s dialect', (type, dialect) => {
    expect(dialectForType(type).name).toBe(dialect);
  });

  it('refuses any other type, naming the supported ones', () => {
    expect(() => dialectForType('oracle')).toThrow(OutboxConfigurationError);
    expect(() => dialectForType('oracle')).toThrow(
      'Invalid outbox option "dataSource": the outbox does not support TypeORM database type "oracle"; ' +
        'supported: postgres, mysql, mariadb, sqlite, better-sqlite3',
    );
  });

  it.each([
    ['sqlite', true],
    ['better-sqlite3', true],
    ['postgres', false],
    ['mariadb', false],
  ])('knows whether a %s DataSource is SQLite: %p', (type, expected) => {
    expect(isSqlite({ options: { type } } as unknown as DataSource)).toBe(expected);
  });
});
