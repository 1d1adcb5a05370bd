import { getMetadataArgsStorage } from 'typeorm';
import { StatementBuilder } from '../../lib/dialects/shared/statement-builder';
import { CLAIMED, OUTBOX_COLUMNS } from '../../lib/dialects/shared/outbox-columns';
import { decodeClaimed, decodeRow, INSERT_COLUMNS } from '../../lib/dialects/shared/dialect.util';
import { createOutboxEntity } from '../../lib/schema/outbox-event.entity';

const numbered = (n: number) => `$${n}`;
const question = () => '?';

describe('StatementBuilder', () => {
  it('numbers each named value once, by where it first appears in the text, and reuses its number', () => {
    const b = new StatementBuilder(numbered);
    const p = b.named({ token: 't', max: 5 });
    const fragment = `a >= ${p.max}`;
    const statement = b.statement(`SET x = ${p.token} WHERE ${fragment} AND b < ${p.max} AND c = ${b.bind('c')}`);
    expect(statement).toEqual({ sql: 'SET x = $1 WHERE a >= $2 AND b < $2 AND c = $3', params: ['t', 5, 'c'] });
  });

  it('repeats a named value for each question mark, in the order of the text, not of binding', () => {
    const b = new StatementBuilder(question);
    const p = b.named({ token: 't', max: 5 });
    const late = b.bind('late');
    const statement = b.statement(`${late} ${p.max} ${p.token} ${p.max}`);
    expect(statement).toEqual({ sql: '? ? ? ?', params: ['late', 5, 't', 5] });
  });

  it('leaves out values bound but not used, and binds null and arrays as they are', () => {
    const b = new StatementBuilder(numbered);
    b.bind('unused');
    const ids = b.bind(['a', 'b']);
    const none = b.bind(null);
    expect(b.statement(`id = ANY(${ids}) AND k IS NOT DISTINCT FROM ${none}`)).toEqual({
      sql: 'id = ANY($1) AND k IS NOT DISTINCT FROM $2',
      params: [['a', 'b'], null],
    });
  });
});

describe('the one column list', () => {
  it('makes the entity: every column, with its name, nullability and primary key', () => {
    const entity = createOutboxEntity('column_list_check');
    const columns = getMetadataArgsStorage().columns.filter((c) => c.target === entity);
    expect(
      columns.map((c) => [c.propertyName, c.options.name, c.options.nullable, c.options.primary === true]),
    ).toEqual(OUTBOX_COLUMNS.map((c) => [c.property, c.name, c.primary ? false : c.nullable, c.primary === true]));
  });

  it('makes the decoders: a stored row has every property, a claimed row those the claim returns', () => {
    const row = Object.fromEntries(OUTBOX_COLUMNS.map((c) => [c.name, null]));
    Object.assign(row, { id: 'e', topic: 't', status: 'pending', attempts: 1, payload: '{}', headers: '{}' });
    Object.assign(row, { available_at: 0, created_at: '2026-01-01T00:00:00.000Z', completed_handlers: '[]' });
    Object.assign(row, { expired_attempts: 0, redrive_count: 0 });
    expect(Object.keys(decodeRow(row)).sort()).toEqual(OUTBOX_COLUMNS.map((c) => c.property).sort());
    const claimed = decodeClaimed({ ...row, created_at: 1_767_225_600_000 });
    expect(Object.keys(claimed).sort()).toEqual(CLAIMED.map((c) => c.property).sort());
    expect(claimed.createdAt).toEqual(new Date('2026-01-01T00:00:00.000Z'));
    expect(decodeRow(row).availableAt).toEqual(new Date(0));
  });

  it('lists the inserted columns in the order of the insert’s values', () => {
    expect(INSERT_COLUMNS).toEqual([
      'id',
      'topic',
      'key',
      'dedupe_key',
      'payload',
      'headers',
      'available_at',
      'trace_context',
    ]);
  });
});
