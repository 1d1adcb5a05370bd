/*
 * What of the publisher's trace context an event keeps. The propagators write it (W3C `traceparent`,
 * `tracestate`, `baggage` by default, or whatever the application registered), and a publish must
 * never fail over it: what does not fit is left out, never refused.
 */

/** Any one field: W3C Baggage's own limit of its header (8,192 bytes), which its propagator keeps to. */
export const MAX_TRACE_FIELD_LENGTH = 8192;
/** Every field together, as the JSON stored: a small part of MySQL's `text` column. */
export const MAX_TRACE_CONTEXT_LENGTH = 16 * 1024;

/** Header names and values that every transport can send as they are (trace context is ASCII). */
const FIELD_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$/;
const FIELD_VALUE = /^[\x20-\x7e\t]*$/;

export interface FittedTraceContext {
  /** The fields kept, as JSON; undefined when none is. */
  json: string | undefined;
  /** What was left out or cut, for the warning; empty when everything fitted. */
  left: string[];
}

/** The fields of `carrier` that fit, in its order: a too long `baggage` cut between its entries, any other field left out. */
export function fitTraceContext(carrier: Record<string, unknown>): FittedTraceContext {
  const kept: Record<string, string> = {};
  const left: string[] = [];
  // The JSON's braces, and for each field kept its quoted name, a colon, its quoted value and a comma.
  let used = 2;
  let any = false;
  for (const [name, value] of Object.entries(carrier)) {
    if (!FIELD_NAME.test(name) || typeof value !== 'string' || !FIELD_VALUE.test(value)) {
      left.push(`${FIELD_NAME.test(name) ? name : 'a field'} (not printable ASCII text)`);
      continue;
    }
    const overhead = JSON.stringify(name).length + 2;
    const room = Math.min(MAX_TRACE_FIELD_LENGTH + 2, MAX_TRACE_CONTEXT_LENGTH - used - overhead);
    let fitted = value;
    if (JSON.stringify(value).length > room) {
      fitted = name.toLowerCase() === 'baggage' ? entriesThatFit(value, room) : '';
      const entries = (text: string) => (text === '' ? 0 : text.split(',').length);
      left.push(
        fitted === ''
          ? `${name} (${value.length} characters)`
          : `${name} cut to ${entries(fitted)} of its ${entries(value)} entries (${value.length} characters)`,
      );
      if (fitted === '') continue;
    }
    kept[name] = fitted;
    used += overhead + JSON.stringify(fitted).length;
    any = true;
  }
  return { json: any ? JSON.stringify(kept) : undefined, left };
}

/** The entries of a list (`a=1,b=2`) that fit `room` as a JSON string, in their order: one too long is skipped. */
function entriesThatFit(list: string, room: number): string {
  let fitted = '';
  for (const entry of list.split(',')) {
    const next = fitted === '' ? entry : `${fitted},${entry}`;
    if (entry.trim() !== '' && JSON.stringify(next).length <= room) fitted = next;
  }
  return fitted;
}
