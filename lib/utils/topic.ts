import { OutboxValidationError } from '../errors/outbox.errors';
import { quoteValue } from './describe-value';

/** A topic as published: dot-separated words, no wildcards. */
const TOPIC = /^[A-Za-z0-9._:-]{1,128}$/;
/** A segment of a route's topic pattern, besides the wildcards * and #. */
const SEGMENT = /^[A-Za-z0-9_:-]+$/;

export function validateTopic(topic: unknown): string {
  if (typeof topic !== 'string' || !TOPIC.test(topic)) {
    throw new OutboxValidationError(
      'topic',
      `expected 1 to 128 characters of letters, digits and . _ : -, got ${quoteValue(topic)}`,
    );
  }
  return topic;
}

/** Why `pattern` is not a valid route topic, or undefined when it is. */
export function validateTopicPattern(pattern: unknown): string | undefined {
  if (typeof pattern !== 'string' || pattern.length === 0 || pattern.length > 128) {
    return `expected a topic pattern of 1 to 128 characters, got ${typeof pattern === 'string' ? `"${pattern}"` : String(pattern)}`;
  }
  const bad = pattern.split('.').find((s) => s !== '*' && s !== '#' && !SEGMENT.test(s));
  if (bad !== undefined) {
    return (
      `"${pattern}" has the segment "${bad}"; segments are separated by dots and are either ` +
      'letters, digits and _ : -, or * (one segment), or # (any number of segments)'
    );
  }
  return undefined;
}

/** Whether `topic` matches `pattern`: `*` is exactly one dot-separated segment, `#` any number of them. */
export function topicMatches(pattern: string, topic: string): boolean {
  const p = pattern.split('.');
  const t = topic.split('.');
  // match[i][j]: the first i pattern segments match the first j topic segments.
  let previous = new Array<boolean>(t.length + 1).fill(false);
  previous[0] = true;
  for (let i = 1; i <= p.length; i++) {
    const current = new Array<boolean>(t.length + 1).fill(false);
    const segment = p[i - 1];
    if (segment === '#') current[0] = previous[0];
    for (let j = 1; j <= t.length; j++) {
      if (segment === '#') current[j] = previous[j] || current[j - 1];
      else current[j] = previous[j - 1] && (segment === '*' || segment === t[j - 1]);
    }
    previous = current;
  }
  return previous[t.length];
}
