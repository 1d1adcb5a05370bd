import {
  fitTraceContext,
  MAX_TRACE_CONTEXT_LENGTH,
  MAX_TRACE_FIELD_LENGTH,
} from '../../lib/observability/trace-context';

const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
const parse = (json: string | undefined) => JSON.parse(json!) as Record<string, string>;

describe('what of a trace context an event keeps', () => {
  it('keeps every field that fits, as given, and reports nothing', () => {
    const baggage = `a=${'x'.repeat(4000)},b=${'y'.repeat(4000)}`;
    const fitted = fitTraceContext({ traceparent, tracestate: 'v=1', baggage });
    expect(parse(fitted.json)).toEqual({ traceparent, tracestate: 'v=1', baggage });
    expect(fitted.left).toEqual([]);
  });

  it('cuts a baggage over the field limit between its entries, skipping one too long, keeping its order', () => {
    const baggage = [`a=${'a'.repeat(3000)}`, `b=${'b'.repeat(6000)}`, `c=${'c'.repeat(3000)}`, 'd=1'].join(',');
    const fitted = fitTraceContext({ traceparent, baggage });
    expect(parse(fitted.json)).toEqual({ traceparent, baggage: `a=${'a'.repeat(3000)},c=${'c'.repeat(3000)},d=1` });
    expect(fitted.left).toEqual([`baggage cut to 3 of its 4 entries (${baggage.length} characters)`]);
  });

  it('leaves out any other field over the limit, and fields that are not printable ASCII', () => {
    const fitted = fitTraceContext({
      traceparent,
      'x-long': 'l'.repeat(MAX_TRACE_FIELD_LENGTH + 1),
      'x-line': 'a\nb',
      'x-emoji': '🙂',
      'bad name': 'v',
      'x-number': 1,
    });
    expect(parse(fitted.json)).toEqual({ traceparent });
    expect(fitted.left).toEqual([
      `x-long (${MAX_TRACE_FIELD_LENGTH + 1} characters)`,
      'x-line (not printable ASCII text)',
      'x-emoji (not printable ASCII text)',
      'a field (not printable ASCII text)',
      'x-number (not printable ASCII text)',
    ]);
  });

  it('keeps the whole within its limit, measured as JSON with its escapes', () => {
    // 3,000 quotes are 6,002 characters of JSON: two such fields fit in 16,384, a third does not.
    const carrier: Record<string, string> = {};
    for (let i = 0; i < 4; i++) carrier[`f${i}`] = '"'.repeat(3000);
    carrier.traceparent = traceparent;
    const fitted = fitTraceContext(carrier);
    expect(fitted.json!.length).toBeLessThanOrEqual(MAX_TRACE_CONTEXT_LENGTH);
    expect(Object.keys(parse(fitted.json))).toEqual(['f0', 'f1', 'traceparent']);
    expect(fitted.left).toEqual(['f2 (3000 characters)', 'f3 (3000 characters)']);
  });

  it('keeps nothing from an empty or unfit carrier', () => {
    expect(fitTraceContext({})).toEqual({ json: undefined, left: [] });
    expect(fitTraceContext({ baggage: 'x'.repeat(MAX_TRACE_FIELD_LENGTH + 1) })).toEqual({
      json: undefined,
      left: [`baggage (${MAX_TRACE_FIELD_LENGTH + 1} characters)`],
    });
  });
});
