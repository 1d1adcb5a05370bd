import { LIMITS } from '../outbox.constants';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import { describeValue } from '../utils/describe-value';

/** The one check of a table name, wherever one is given (module options, entity, migrations). */
export function validateTableName(tableName: unknown, option = 'tableName'): string {
  if (typeof tableName !== 'string' || !LIMITS.tableName.test(tableName)) {
    throw new OutboxConfigurationError(
      option,
      `expected 1 to 48 characters matching ${LIMITS.tableName.source} (letters, digits, underscore; ` +
        `not starting with a digit), got ${describeValue(tableName)}`,
    );
  }
  return tableName;
}
