import { OutboxConfigurationError } from '../errors/outbox.errors';
import type {
  OutboxAcknowledgeMode,
  OutboxDeadHeadPolicy,
  OutboxOrdering,
  ResolvedKeyOrder,
} from '../interfaces/outbox-ordering.interface';
import { describeValue } from '../utils/describe-value';
import { optionSection } from '../utils/option-checks';
import { topicMatches, validateTopicPattern } from '../utils/topic';

const ORDERING_KEYS = ['topic', 'deadHead', 'acknowledge'];
const DEAD_HEAD_POLICIES: readonly OutboxDeadHeadPolicy[] = ['block', 'skip'];
const ACKNOWLEDGE_MODES: readonly OutboxAcknowledgeMode[] = ['event', 'run'];
/** Topics seen are few in practice; the cap keeps a flood of distinct topics from growing memory. */
const MAX_CACHED_TOPICS = 10_000;

/** An entry of the `ordering` option, checked and defaulted. */
export interface ResolvedOrdering {
  topic: string;
  deadHead: OutboxDeadHeadPolicy;
  acknowledge: OutboxAcknowledgeMode;
}

/**
 * Which topics are delivered in per-key order (the `ordering` option), and what a dead head of each
 * does. The first entry whose pattern matches a topic decides; a topic no entry matches is unordered.
 */
export class KeyOrder implements ResolvedKeyOrder {
  private readonly byTopic = new Map<string, ResolvedOrdering | null>();

  constructor(readonly rules: readonly ResolvedOrdering[]) {}

  get enabled(): boolean {
    return this.rules.length > 0;
  }

  /** The entry that orders `topic`, or undefined when its events are unordered. */
  of(topic: string): ResolvedOrdering | undefined {
    let found = this.byTopic.get(topic);
    if (found === undefined) {
      found = this.rules.find((rule) => topicMatches(rule.topic, topic)) ?? null;
      if (this.byTopic.size >= MAX_CACHED_TOPICS) this.byTopic.clear();
      this.byTopic.set(topic, found);
    }
    return found ?? undefined;
  }

  orders(topic: string, key: string | null): key is string {
    return key !== null && this.of(topic) !== undefined;
  }

  skipsDeadHead(topic: string): boolean {
    return this.of(topic)?.deadHead === 'skip';
  }

  acknowledgesByRun(topic: string): boolean {
    return this.of(topic)?.acknowledge === 'run';
  }
}

/** The `ordering` option: an array of `{ topic, deadHead?, acknowledge? }`, each pattern checked like a route's. */
export function resolveOrdering(value: unknown): ResolvedOrdering[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new OutboxConfigurationError(
      'ordering',
      `expected an array such as [{ topic: 'order.*' }], got ${describeValue(value)}`,
    );
  }
  return value.map((entry, i) => {
    const where = `ordering[${i}]`;
    const o = optionSection(where, entry, ORDERING_KEYS) as Partial<OutboxOrdering>;
    const problem = validateTopicPattern(o.topic);
    if (problem) throw new OutboxConfigurationError(`${where}.topic`, problem);
    const deadHead = o.deadHead ?? 'block';
    if (!DEAD_HEAD_POLICIES.includes(deadHead)) {
      throw new OutboxConfigurationError(
        `${where}.deadHead`,
        `expected 'block' (the key waits for a redrive or a discard of its dead head) or 'skip' (the next ` +
          `event of the key goes on), got ${describeValue(deadHead)}`,
      );
    }
    const acknowledge = o.acknowledge ?? 'event';
    if (!ACKNOWLEDGE_MODES.includes(acknowledge)) {
      throw new OutboxConfigurationError(
        `${where}.acknowledge`,
        `expected 'event' (each event acknowledged before its key's next starts: a crash repeats at most the ` +
          `event in flight) or 'run' (a key's run acknowledged together: a crash repeats its unacknowledged ` +
          `events, in order), got ${describeValue(acknowledge)}`,
      );
    }
    return { topic: o.topic!, deadHead, acknowledge };
  });
}
