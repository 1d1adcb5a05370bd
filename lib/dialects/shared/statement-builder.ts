import type { Bind, Statement } from './outbox-dialect.interface';

/** Where a bound value stands in SQL text until `statement()` writes the database's placeholder there. */
const MARK = '\u0001';
// eslint-disable-next-line no-control-regex -- the mark is a control character on purpose: no SQL text holds one
const MARKED = /\u0001(\d+)\u0001/g;

/**
 * Builds one statement from SQL text and bound values: `bind(value)` and `named({ … })` return where a
 * value goes, and `statement(sql)` writes each place's placeholder in the database's form. A named value
 * is bound once and may appear any number of times, in any order: numbered placeholders (`$1`) name it
 * once, question marks repeat it for each place. Fragments can be built first and used anywhere, since
 * placeholders are numbered in the order they appear in the final text.
 */
export class StatementBuilder {
  private readonly values: unknown[] = [];
  /** `?` for every parameter: each place takes a value of its own. */
  private readonly repeats: boolean;

  constructor(private readonly placeholder: (n: number) => string) {
    this.repeats = placeholder(1) === placeholder(2);
  }

  /** A value used in one place (or in several, by the returned text). */
  readonly bind: Bind = (value) => {
    this.values.push(value);
    return `${MARK}${this.values.length - 1}${MARK}`;
  };

  /** Values by name, each bound once: `const p = b.named({ token }); … ${p.token} …`. */
  named<T extends Record<string, unknown>>(values: T): { readonly [K in keyof T]: string } {
    const places = {} as Record<string, string>;
    for (const [name, value] of Object.entries(values)) places[name] = this.bind(value);
    return places as { [K in keyof T]: string };
  }

  statement(sql: string): Statement {
    const params: unknown[] = [];
    const numbers = new Map<number, string>();
    const text = sql.replace(MARKED, (_, index: string) => {
      const i = Number(index);
      if (this.repeats) {
        params.push(this.values[i]);
        return this.placeholder(params.length);
      }
      let placeholder = numbers.get(i);
      if (placeholder === undefined) {
        params.push(this.values[i]);
        placeholder = this.placeholder(params.length);
        numbers.set(i, placeholder);
      }
      return placeholder;
    });
    return { sql: text, params };
  }
}
