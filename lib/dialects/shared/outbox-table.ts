import type { DataSource } from 'typeorm';
import { OutboxConfigurationError } from '../../errors/outbox.errors';
import { LIMITS } from '../../outbox.constants';

/**
 * Where an outbox table lives, as TypeORM places the entity: the DataSource's `entityPrefix` before the
 * name and, on PostgreSQL, its `schema` in front. The migration, the store and the entity must agree on
 * it, or the worker writes one table while the entity reads another.
 */
export interface OutboxTable {
  /** PostgreSQL schema; absent when the DataSource names none (the connection's search_path decides). */
  readonly schema?: string;
  /** The table's name as stored, prefix included. */
  readonly name: string;
  /** `schema.name` or `name`, for messages and keys. */
  readonly path: string;
}

export function outboxTable(name: string, schema?: string): OutboxTable {
  return { schema, name, path: schema ? `${schema}.${name}` : name };
}

/**
 * The table of an outbox's ordered keys (schema version 7), beside the outbox table: its name with
 * `_keys` appended, in the same schema.
 */
export function keysTableOf(table: OutboxTable): OutboxTable {
  return outboxTable(`${table.name}_keys`, table.schema);
}

/** The table `tableName` of the outbox on `dataSource`, placed where TypeORM places its entity. */
export function outboxTableOn(dataSource: DataSource, tableName: string): OutboxTable {
  const options = dataSource.options as { type: string; schema?: string; entityPrefix?: string };
  const name = options.entityPrefix
    ? dataSource.namingStrategy.prefixTableName(options.entityPrefix, tableName)
    : tableName;
  if (!LIMITS.tableName.test(name)) {
    // Index names add up to 14 characters to the table's (`_retention_idx`); 48 keeps them within every
    // database's limit (PostgreSQL's 63).
    throw new OutboxConfigurationError(
      'tableName',
      `with the DataSource's entityPrefix "${options.entityPrefix}" the table name becomes "${name}", which is not ` +
        `1 to 48 characters matching ${LIMITS.tableName.source}; shorten the prefix or the tableName`,
    );
  }
  return outboxTable(name, options.type === 'postgres' && options.schema ? options.schema : undefined);
}
