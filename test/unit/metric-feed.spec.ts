import { Counter, Registry } from 'prom-client';
import { byTopicAndOutcome } from '../../lib/observability/metric-feed';
import { Tally } from '../../lib/observability/prometheus-metrics';

describe('byTopicAndOutcome', () => {
  it('builds each label set once, and past its cap starts again, handing over what it held', () => {
    const made: string[] = [];
    const dropped: string[][] = [];
    const memo = byTopicAndOutcome(
      (topic, outcome) => made[made.push(`${topic}/${outcome}`) - 1],
      (values) => dropped.push(values),
      3,
    );
    expect([memo('a', 'x'), memo('a', 'x'), memo('b'), memo('a', 'y')]).toEqual(['a/x', 'a/x', 'b/undefined', 'a/y']);
    expect(dropped).toEqual([]);
    for (let n = 0; n < 10; n++) memo(`t${n}`, 'x');
    const held = made.length - dropped.flat().length;
    expect({ held, dropped: dropped.map((values) => values.length) }).toEqual({ held: 1, dropped: [3, 3, 3, 3] });
    // A label set dropped is built again when it comes back.
    expect(memo('a', 'x')).toBe('a/x');
    expect(made.filter((value) => value === 'a/x')).toHaveLength(2);
  });
});

describe('Tally', () => {
  it('keeps at most its cap of counts however many topics come, and counts every event of each', async () => {
    const registry = new Registry();
    const counter = new Counter({
      name: 'deliveries',
      help: 'test',
      labelNames: ['topic', 'outcome'],
      registers: [registry],
    });
    const tally = new Tally();
    const count = tally.of(counter, 4);
    const topics = Array.from({ length: 25 }, (_, n) => `topic.${n}`);
    let largest = 0;
    // Round after round over every topic: each comes back after the memo has started again.
    for (let round = 0; round < 3; round++) {
      for (const [n, topic] of topics.entries()) {
        for (let i = 0; i <= n % 3; i++) count(topic, 'delivered').n++;
        count(topic, 'dead').n++;
        largest = Math.max(largest, tally.size);
      }
    }
    expect(largest).toBe(4);
    tally.flush();
    const counted = (await counter.get()).values.map((v) => [v.labels.topic, v.labels.outcome, v.value]);
    const expected = topics.flatMap((topic, n) => [
      [topic, 'delivered', 3 * ((n % 3) + 1)],
      [topic, 'dead', 3],
    ]);
    expect(counted.sort()).toEqual(expected.sort());
  });
});
