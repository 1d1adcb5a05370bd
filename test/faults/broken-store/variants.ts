/**
 * Deliberately broken variants of the outbox store, for checking that the contracts in
 * contracts.ts catch the bugs they are meant to catch. Each variant patches one live `OutboxStore`
 * instance — never the dialect class or a dialect object another store may share — and works by
 * rewriting the real dialect's statements, so it follows the library's SQL as that changes. A
 * rewrite that no longer finds what it must change throws `VariantNotApplicableError` instead of
 * silently leaving the store correct.
 */
import { randomUUID } from 'node:crypto';
import { AsyncResource } from 'node:async_hooks';
import { isSqlite } from '../../../lib/dialects/dialect-for-type';
import type { OutboxDialect, SqlExecutor, Statement } from '../../../lib/dialects/shared/outbox-dialect.interface';
import { sqliteGateFor } from '../../../lib/dialects/sqlite/sqlite-connection-gate';
import type { OutboxStore } from '../../../lib/store/outbox.store';
import { acknowledgeStatement } from '../../../lib/dialects/shared/outcome-statements';

/** A variant planted in one store. */
export interface PlantedVariant {
  readonly name: string;
  /** How many times the broken behaviour ran (statements rewritten, inserts diverted). */
  applied(): number;
  /** Puts the store back as it was; waits for any write the variant still has under way. */
  restore(): Promise<void>;
}

export type StoreVariant = (store: OutboxStore) => PlantedVariant;

export class VariantNotApplicableError extends Error {
  constructor(variant: string, what: string, sql: string) {
    super(`The ${variant} variant found no ${what} to break in:\n${sql}\nUpdate the variant to the dialect's new SQL.`);
    this.name = 'VariantNotApplicableError';
  }
}

/**
 * The acknowledgement no longer checks the claim token or the lease: it marks delivered any pending
 * row it is given, so a worker whose lease expired overwrites the state of the claim that took over.
 * Each condition of the acknowledgement's WHERE clause on `claim_token` or `available_at` is made
 * always true (placeholders stay, so parameters keep their positions).
 */
export function ackWithoutToken(store: OutboxStore): PlantedVariant {
  let rewritten = 0;
  const real = Object.getOwnPropertyDescriptor(store, 'acknowledge');
  // The acknowledgement is the same statement on every database (outcome-statements.ts): the store's
  // own method is replaced by one that sends the rewritten statement.
  store.acknowledge = async (ids, token) => {
    if (ids.length === 0) return 0;
    const statement = acknowledgeStatement(store.dialect.flavor, store.table, ids, token);
    const { sql, changed } = rewriteClauses(statement.sql, 'WHERE', (condition) =>
      names(condition, 'claim_token') || names(condition, 'available_at') ? `(${condition} OR 1 = 1)` : undefined,
    );
    if (!changed.some((condition) => names(condition, 'claim_token'))) {
      throw new VariantNotApplicableError('ackWithoutToken', 'claim token condition', statement.sql);
    }
    rewritten++;
    return (await store.executor.run({ ...statement, sql })).affected;
  };
  return {
    name: 'ackWithoutToken',
    applied: () => rewritten,
    restore: () => {
      if (real) Object.defineProperty(store, 'acknowledge', real);
      else delete (store as Partial<OutboxStore>).acknowledge;
      return Promise.resolve();
    },
  };
}

/**
 * The claim also takes rows whose lease is still live: a row holding a claim token is claimable
 * whatever its `available_at`, so two workers run the same event at once. Every condition on
 * `available_at` in the claim's WHERE clauses (the locking selection and the update's re-check)
 * gains `OR claim_token IS NOT NULL`; rows merely not yet due (delays, backoff) stay unclaimable.
 */
export function claimIgnoresLease(store: OutboxStore): PlantedVariant {
  let rewritten = 0;
  return patchClaim(
    store,
    'claimIgnoresLease',
    'due-time condition',
    (statement) => {
      const { sql, changed } = rewriteClauses(statement.sql, 'WHERE', (condition) => {
        const column = identifier(condition, 'available_at');
        if (!column || names(condition, 'claim_token')) return undefined;
        return `(${condition} OR ${column.replace('available_at', 'claim_token')} IS NOT NULL)`;
      });
      rewritten += changed.length;
      return { statement: { ...statement, sql }, changed: changed.length };
    },
    () => rewritten,
  );
}

/**
 * The claim does not increment `attempts`: an attempt that crashes before its acknowledgement is
 * never counted, so a message that kills its worker is redelivered forever and never dead-lettered.
 * The claim's assignment to `attempts` keeps its expression (and placeholders) but is multiplied by
 * zero and added to the old value.
 */
export function attemptsNotCounted(store: OutboxStore): PlantedVariant {
  let rewritten = 0;
  return patchClaim(
    store,
    'attemptsNotCounted',
    'assignment to attempts',
    (statement) => {
      const { sql, changed } = rewriteClauses(statement.sql, 'SET', (assignment) => {
        const match = /^((?:[\w]+\.)?([`"])attempts\2)\s*=\s*([\s\S]+)$/.exec(assignment);
        if (!match) return undefined;
        const column = `${match[2]}attempts${match[2]}`;
        return `${match[1]} = ${column} + 0 * (${match[3]})`;
      });
      rewritten += changed.length;
      // Only the claim's UPDATE has a SET clause; MySQL's locking selection has nothing to break.
      const isUpdate = clauses(statement.sql, 'SET').length > 0;
      return { statement: { ...statement, sql }, changed: isUpdate ? changed.length : undefined };
    },
    () => rewritten,
  );
}

/**
 * Publishing writes the events outside the caller's transaction, on a connection of its own that
 * commits each statement at once: when the caller rolls back, the events stay — messages about
 * business changes that never happened.
 *
 * On PostgreSQL and MariaDB the insert runs, awaited, on a fresh pooled connection. SQLite has one
 * writer and TypeORM one connection per DataSource, so an autocommitting write cannot run while the
 * caller's transaction holds it; there the variant queues the insert behind that transaction on the
 * store's connection gate and returns made-up ids at once (the form this bug takes with one writer).
 */
export function publishAutocommits(store: OutboxStore): PlantedVariant {
  const insert = store.insert.bind(store);
  const pending = new Set<Promise<unknown>>();
  const failures: unknown[] = [];
  let diverted = 0;
  // Bound to the planting context, so the SQLite gate does not see the caller's transaction as its own.
  const outsideCallerContext = AsyncResource.bind(<T>(work: () => Promise<T>) => work());

  const onFreshConnection = async (events: Parameters<OutboxStore['insert']>[1]) => {
    const runner = store.dataSource.createQueryRunner();
    try {
      return await insert(runner.manager, events);
    } finally {
      await runner.release();
    }
  };

  store.insert = async (_callersManager, events) => {
    diverted++;
    if (!isSqlite(store.dataSource)) return onFreshConnection(events);
    const gate = sqliteGateFor(store.dataSource);
    const write = outsideCallerContext(() => gate.exclusive(() => onFreshConnection(events))).catch(
      (error: unknown) => {
        failures.push(error);
      },
    );
    pending.add(write);
    void write.finally(() => pending.delete(write));
    return events.map(() => ({ id: randomUUID(), inserted: true }));
  };

  return {
    name: 'publishAutocommits',
    applied: () => diverted,
    restore: async () => {
      Reflect.deleteProperty(store, 'insert');
      await Promise.all(pending);
      if (failures.length > 0) throw failures[0];
    },
  };
}

export const VARIANTS = { ackWithoutToken, claimIgnoresLease, attemptsNotCounted, publishAutocommits } satisfies Record<
  string,
  StoreVariant
>;

/* ------------------------------------------------------------------------------------------------ */

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * Gives `store` a dialect of its own that delegates to the one it had, with `overrides` on top. The
 * dialect object is never modified: another store of the same database type may share it.
 */
function patchDialect(
  store: OutboxStore,
  name: string,
  overrides: (real: OutboxDialect) => Partial<OutboxDialect>,
  applied: () => number,
): PlantedVariant {
  const real = store.dialect;
  const patched: OutboxDialect = Object.assign(Object.create(real) as OutboxDialect, overrides(real));
  (store as Mutable<OutboxStore>).dialect = patched;
  return {
    name,
    applied,
    restore: () => {
      (store as Mutable<OutboxStore>).dialect = real;
      return Promise.resolve();
    },
  };
}

/**
 * Runs the real claim with every statement it sends through `rewrite`. `changed` is the number of
 * rewrites a statement took, or undefined for a statement the variant has nothing to do with; a
 * claim whose statements took none fails with VariantNotApplicableError.
 */
function patchClaim(
  store: OutboxStore,
  name: string,
  what: string,
  rewrite: (statement: Statement) => { statement: Statement; changed: number | undefined },
  applied: () => number,
): PlantedVariant {
  return patchDialect(
    store,
    name,
    (real) => ({
      async claim(executor, table, args) {
        const seen: string[] = [];
        let changed = 0;
        let relevant = false;
        const through = (statement: Statement) => {
          const result = rewrite(statement);
          seen.push(statement.sql);
          if (result.changed !== undefined) {
            relevant = true;
            changed += result.changed;
          }
          return result.statement;
        };
        const rewriting: SqlExecutor = {
          run: (statement) => executor.run(through(statement)),
          transaction: (work) => executor.transaction((run) => work((statement) => run(through(statement)))),
        };
        // `this` is the patched dialect, so the claim's own calls (claimSelection…) reach the real methods.
        const rows = await real.claim.call(this, rewriting, table, args);
        if (relevant && changed === 0) throw new VariantNotApplicableError(name, what, seen.join('\n;\n'));
        return rows;
      },
    }),
    applied,
  );
}

/** True when `sql` refers to the quoted column `column` ("x" or `x`, qualified or not). */
function names(sql: string, column: string): boolean {
  return identifier(sql, column) !== undefined;
}

/** The first reference to the quoted column `column` in `sql`, with its qualifier: `o."available_at"`. */
function identifier(sql: string, column: string): string | undefined {
  return new RegExp(`(?:\\w+\\.)?([\`"])${column}\\1`).exec(sql)?.[0];
}

/*
 * Just enough SQL structure to rewrite the conditions of a WHERE clause or the assignments of a SET
 * clause, at any nesting depth, without touching anything else: string literals and quoted
 * identifiers are skipped, parentheses give the depth, and a clause ends at the first keyword that
 * closes it at its own depth.
 */

interface Span {
  start: number;
  end: number;
}

const CLAUSE_END: Record<'WHERE' | 'SET', RegExp> = {
  WHERE: /(?:ORDER\s+BY|GROUP\s+BY|HAVING|LIMIT|OFFSET|RETURNING|FOR\s+UPDATE|FOR\s+SHARE|UNION|WINDOW)\b/iy,
  SET: /(?:FROM|WHERE|RETURNING)\b/iy,
};
const AND = /AND\b/iy;

/** `sql` with the insides of literals and quoted identifiers blanked out (same length). */
function codeOnly(sql: string): string {
  let code = '';
  let quote: string | undefined;
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i];
    if (quote === undefined) {
      if (c === "'" || c === '"' || c === '`') quote = c;
      code += c;
    } else if (c === quote && sql[i + 1] === quote) {
      code += '  ';
      i++;
    } else if (c === quote) {
      quote = undefined;
      code += c;
    } else {
      code += ' ';
    }
  }
  return code;
}

/** The parenthesis depth at each position; a bracket has the depth outside it. */
function depths(code: string): number[] {
  let depth = 0;
  return [...code].map((c) => {
    if (c === '(') return depth++;
    if (c === ')') return --depth;
    return depth;
  });
}

function matchesAt(pattern: RegExp, code: string, at: number): RegExpExecArray | null {
  pattern.lastIndex = at;
  return pattern.exec(code);
}

/** The items of every `keyword` clause in `sql`: the conditions joined by AND, or the assignments. */
function clauses(sql: string, keyword: 'WHERE' | 'SET'): Span[][] {
  const code = codeOnly(sql);
  const depth = depths(code);
  const wordStart = (i: number) => i === 0 || !/[\w$.]/.test(code[i - 1]);
  const found: Span[][] = [];
  for (const match of code.matchAll(new RegExp(`\\b${keyword}\\b`, 'gi'))) {
    const level = depth[match.index];
    const items: Span[] = [];
    let start = match.index + keyword.length;
    let i = start;
    for (; i < code.length; i++) {
      if (depth[i] < level || code[i] === ';') break;
      if (depth[i] !== level) continue;
      if (wordStart(i) && matchesAt(CLAUSE_END[keyword], code, i)) break;
      const separator =
        keyword === 'SET' ? (code[i] === ',' ? 1 : 0) : wordStart(i) ? (matchesAt(AND, code, i)?.[0].length ?? 0) : 0;
      if (separator > 0) {
        items.push({ start, end: i });
        start = i + separator;
        i += separator - 1;
      }
    }
    items.push({ start, end: i });
    found.push(items.map((span) => trim(sql, span)));
  }
  return found;
}

function trim(sql: string, { start, end }: Span): Span {
  while (start < end && /\s/.test(sql[start])) start++;
  while (end > start && /\s/.test(sql[end - 1])) end--;
  return { start, end };
}

/**
 * Replaces each item of every `keyword` clause for which `change` returns new text. Where a changed
 * item contains another changed item (a subquery), only the inner one is rewritten.
 */
function rewriteClauses(
  sql: string,
  keyword: 'WHERE' | 'SET',
  change: (item: string) => string | undefined,
): { sql: string; changed: string[] } {
  const edits = clauses(sql, keyword)
    .flat()
    .flatMap((span) => {
      const text = change(sql.slice(span.start, span.end));
      return text === undefined ? [] : [{ ...span, text }];
    });
  const innermost = edits.filter(
    (outer) => !edits.some((inner) => inner !== outer && inner.start >= outer.start && inner.end <= outer.end),
  );
  let result = sql;
  for (const edit of [...innermost].sort((a, b) => b.start - a.start)) {
    result = result.slice(0, edit.start) + edit.text + result.slice(edit.end);
  }
  return { sql: result, changed: innermost.map((edit) => sql.slice(edit.start, edit.end)) };
}
