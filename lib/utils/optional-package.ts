import { OutboxConfigurationError } from '../errors/outbox.errors';
import { packageRequire } from './package-require';

/**
 * Loads an optional peer dependency on first use, with an actionable error when it is missing
 * (STYLE rule 10: optional integrations stay optional).
 */
export function loadOptional<T>(name: string, neededBy: string): T {
  try {
    return packageRequire(name) as T;
  } catch (error) {
    if ((error as { code?: string }).code === 'MODULE_NOT_FOUND') {
      throw new OutboxConfigurationError(neededBy, `it needs the package "${name}": npm install ${name}`);
    }
    throw error;
  }
}
