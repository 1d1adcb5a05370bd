import { OutboxConfigurationError, OUTBOX_DEFAULTS } from '../../lib';
import { LIMITS } from '../../lib/outbox.constants';
import { resolveOutboxOptions, type OutboxModuleOptions } from '../../lib/outbox.options';

const transport = (name: string) => ({ name, send: () => Promise.resolve() });

function rejection(options: unknown): OutboxConfigurationError {
  try {
    resolveOutboxOptions(options as OutboxModuleOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    return error as OutboxConfigurationError;
  }
  throw new Error(`options were accepted: ${JSON.stringify(options)}`);
}

describe('resolveOutboxOptions', () => {
  it('fills every default', () => {
    const resolved = resolveOutboxOptions(undefined);
    expect(resolved.tableName).toBe('outbox_event');
    expect(resolved.worker).toEqual(OUTBOX_DEFAULTS.worker);
    expect(resolved.retry).toEqual(OUTBOX_DEFAULTS.retry);
    expect(resolved.maxPayloadBytes).toBe(1024 * 1024);
    // Delivered rows go after 7 days; dead letters are kept.
    expect(resolved.retention).toEqual({ ...OUTBOX_DEFAULTS.retention, deadMs: undefined });
    expect(OUTBOX_DEFAULTS.retention).toEqual({ deliveredMs: 604_800_000, intervalMs: 60_000, batchSize: 1000 });
  });

  it('turns retention off with false, and defaults what a retention object leaves out', () => {
    expect(resolveOutboxOptions({ retention: false }).retention).toBe(false);
    expect(resolveOutboxOptions({ retention: {} }).retention).toEqual({
      ...OUTBOX_DEFAULTS.retention,
      deadMs: undefined,
    });
    expect(resolveOutboxOptions({ retention: { deadMs: 2_592_000_000, batchSize: 5 } }).retention).toEqual({
      deliveredMs: 604_800_000,
      deadMs: 2_592_000_000,
      intervalMs: 60_000,
      batchSize: 5,
    });
  });

  it('keeps valid values', () => {
    const resolved = resolveOutboxOptions({
      tableName: 'events',
      worker: { enabled: false, batchSize: 500, leaseMs: 5000, renewLease: false },
      retry: { maxAttempts: 3 },
    });
    expect(resolved.worker).toMatchObject({ enabled: false, batchSize: 500, leaseMs: 5000, renewLease: false });
    // Without renewal, the default handler timeout follows a short lease down.
    expect(resolved.worker.handlerTimeoutMs).toBe(2500);
    expect(resolved.retry.maxAttempts).toBe(3);
  });

  describe('worker.renewLease', () => {
    it("is on by default: the handler timeout is its own, not the lease's", () => {
      const resolved = resolveOutboxOptions({ worker: { leaseMs: 5000 } });
      expect(resolved.worker.renewLease).toBe(true);
      expect(resolved.worker.handlerTimeoutMs).toBe(30_000);
      expect(OUTBOX_DEFAULTS.worker.renewLease).toBe(true);
    });

    it('lets handler and route timeouts exceed the lease, up to LIMITS.handlerTimeoutMs', () => {
      expect(LIMITS.handlerTimeoutMs.max).toBe(86_400_000);
      const resolved = resolveOutboxOptions({
        worker: { leaseMs: 1000, handlerTimeoutMs: 86_400_000 },
        transports: [transport('t')],
        routes: [{ topic: '#', transport: 't', timeoutMs: 120_000 }],
      });
      expect(resolved.worker.handlerTimeoutMs).toBe(86_400_000);
      expect(resolved.routes[0].timeoutMs).toBe(120_000);
      expect(resolved.routes[0].retry.maxAttempts).toBe(resolved.retry.maxAttempts);
      // A target's own count is capped by the module's.
      const capped = resolveOutboxOptions({
        retry: { maxAttempts: 5 },
        transports: [transport('t')],
        routes: [
          { topic: 'a', transport: 't', retry: { maxAttempts: 6 } },
          { topic: 'b', transport: 't', retry: { maxAttempts: 2 } },
        ],
      });
      expect(capped.routes.map((route) => route.retry.maxAttempts)).toEqual([5, 2]);
      expect(
        resolveOutboxOptions({ worker: { renewLease: true, leaseMs: 10_000, handlerTimeoutMs: 10_000 } }).worker,
      ).toMatchObject({
        renewLease: true,
        handlerTimeoutMs: 10_000,
      });
    });

    it("off: today's rules, every timeout below the lease by its margin", () => {
      expect(resolveOutboxOptions({ worker: { renewLease: false } }).worker).toMatchObject({
        renewLease: false,
        handlerTimeoutMs: 30_000,
      });
      expect(
        resolveOutboxOptions({ worker: { renewLease: false, leaseMs: 10_000, handlerTimeoutMs: 9000 } }).worker
          .handlerTimeoutMs,
      ).toBe(9000);
    });

    it.each([
      ['worker.renewLease', { worker: { renewLease: 'false' } }, /true or false, got the string "false"/],
      ['worker.renewLease', { worker: { renewLease: 0 } }, /true or false, got number 0/],
      ['worker.renewLease', { worker: { renewLease: null } }, /true or false, got null/],
      ['worker.handlerTimeoutMs', { worker: { handlerTimeoutMs: 86_400_001 } }, /from 1 to 86400000, got 86400001/],
      [
        'worker.handlerTimeoutMs',
        { worker: { renewLease: false, leaseMs: 10_000, handlerTimeoutMs: 20_000 } },
        /shorter than worker.leaseMs.*worker.renewLease/,
      ],
      [
        'routes[0].timeoutMs',
        { transports: [transport('t')], routes: [{ topic: '#', transport: 't', timeoutMs: 86_400_001 }] },
        /from 1 to 86400000/,
      ],
      [
        'routes[0].timeoutMs',
        {
          worker: { renewLease: false },
          transports: [transport('t')],
          routes: [{ topic: '#', transport: 't', timeoutMs: 59_500 }],
        },
        /by at least 1000 ms/,
      ],
    ])('rejects %s in %j', (option, options, message) => {
      const error = rejection(options);
      expect(error.option).toBe(option);
      expect(error.message).toMatch(message);
    });
  });

  it('orders the topics of the ordering option, the first matching entry deciding the dead-head policy', () => {
    const { ordering } = resolveOutboxOptions({
      ordering: [
        { topic: 'order.paid', deadHead: 'skip' },
        { topic: 'order.*' },
        { topic: 'stock.#', deadHead: 'skip' },
      ],
    });
    expect(ordering.enabled).toBe(true);
    expect(ordering.orders('order.placed', 'o-1')).toBe(true);
    expect(ordering.orders('order.placed', null)).toBe(false);
    expect(ordering.orders('payment.placed', 'o-1')).toBe(false);
    expect(['order.paid', 'order.placed', 'stock.a.b'].map((t) => ordering.skipsDeadHead(t))).toEqual([
      true,
      false,
      true,
    ]);
    expect(resolveOutboxOptions({}).ordering.enabled).toBe(false);
  });

  it('resolves routes with the worker defaults', () => {
    const resolved = resolveOutboxOptions({
      transports: [transport('hooks')],
      routes: [
        {
          topic: 'order.*',
          transport: 'hooks',
          options: { url: 'https://example.test/in' },
          retry: { maxDelayMs: 5000 },
        },
      ],
    });
    expect(resolved.routes).toEqual([
      {
        topic: 'order.*',
        transport: 'hooks',
        options: { url: 'https://example.test/in' },
        timeoutMs: 30_000,
        retry: { initialDelayMs: 1000, maxDelayMs: 5000, maxAttempts: 10 },
        concurrency: 9,
      },
    ]);
  });

  it("bounds each target by one less than the worker's lanes, or as told", () => {
    const hooks = (route: object) => ({
      transports: [transport('hooks')],
      routes: [{ topic: '#', transport: 'hooks', ...route }],
    });
    expect(resolveOutboxOptions({}).worker.targetConcurrency).toBe(9);
    expect(resolveOutboxOptions({ worker: { concurrency: 4 } }).worker.targetConcurrency).toBe(3);
    expect(resolveOutboxOptions({ worker: { concurrency: 1 } }).worker.targetConcurrency).toBe(1);
    expect(resolveOutboxOptions({ worker: { targetConcurrency: 2 } }).worker.targetConcurrency).toBe(2);
    expect(resolveOutboxOptions(hooks({})).routes[0].concurrency).toBe(9);
    expect(
      resolveOutboxOptions({ ...hooks({ concurrency: 3 }), worker: { targetConcurrency: 2 } }).routes[0].concurrency,
    ).toBe(3);
    expect(resolveOutboxOptions({ ...hooks({}), worker: { targetConcurrency: 2 } }).routes[0].concurrency).toBe(2);
  });

  it.each([
    ['worker.concurrency', { worker: { concurrency: NaN } }, /NaN/],
    ['worker.batchSize', { worker: { batchSize: '100' } }, /the string "100".*Number\(\)/],
    ['worker.batchSize', { worker: { batchSize: 0 } }, /from 1 to 5000, got 0/],
    ['worker.batchSize', { worker: { batchSize: -5 } }, /got -5/],
    ['worker.batchSize', { worker: { batchSize: 1.5 } }, /whole number/],
    ['worker.enabled', { worker: { enabled: 'false' } }, /true or false, got the string "false"/],
    ['worker.pollIntervalMs', { worker: { pollIntervalMs: Infinity } }, /whole number/],
    ['worker.leaseMs', { worker: { leaseMs: 500 } }, /from 1000 to 3600000/],
    ['worker.targetConcurrency', { worker: { targetConcurrency: 0 } }, /from 1 to 1000, got 0/],
    [
      'routes[0].concurrency',
      { transports: [transport('t')], routes: [{ topic: '#', transport: 't', concurrency: 1.5 }] },
      /whole number/,
    ],
    [
      'worker.handlerTimeoutMs',
      { worker: { renewLease: false, leaseMs: 10_000, handlerTimeoutMs: 20_000 } },
      /shorter than worker.leaseMs/,
    ],
    [
      'worker.handlerTimeoutMs',
      { worker: { renewLease: false, leaseMs: 10_000, handlerTimeoutMs: 9_500 } },
      /by at least 1000 ms/,
    ],
    ['retry.maxAttempts', { retry: { maxAttempts: 0 } }, /from 1 to 100/],
    ['retry.maxAttempts', { retry: { maxAttempts: 101 } }, /from 1 to 100/],
    ['retry.maxDelayMs', { retry: { initialDelayMs: 5000, maxDelayMs: 100 } }, /from 5000/],
    ['retention', { retention: true }, /expected false \(keep every row\) or an object/],
    ['retention', { retention: 'off' }, /the string "off"/],
    ['retention', { retention: null }, /expected false/],
    ['retention.deliveredMs', { retention: { deliveredMs: 0 } }, /from 1000 to 315360000000, got 0/],
    ['retention.deliveredMs', { retention: { deliveredMs: '604800000' } }, /Number\(\)/],
    ['retention.deliveredMs', { retention: { deliveredMs: 1e15 } }, /from 1000 to 315360000000/],
    ['retention.deadMs', { retention: { deadMs: 999 } }, /from 1000/],
    ['retention.deadMs', { retention: { deadMs: Infinity } }, /whole number/],
    ['retention.deadMs', { retention: { deadMs: null } }, /whole number/],
    ['retention.intervalMs', { retention: { intervalMs: 10 } }, /from 1000 to 86400000/],
    ['retention.batchSize', { retention: { batchSize: 0 } }, /from 1 to 10000, got 0/],
    ['retention.batchSize', { retention: { batchSize: 2.5 } }, /whole number/],
    [
      'retention.maxAgeMs',
      { retention: { maxAgeMs: 1000 } },
      /unknown option; allowed here: deliveredMs, deadMs, intervalMs, batchSize/,
    ],
    ['tableName', { tableName: 'drop table;' }, /letters, digits, underscore/],
    ['tableName', { tableName: '1abc' }, /not starting with a digit/],
    ['tableName', { tableName: 'a'.repeat(49) }, /1 to 48/],
    ['worker.pollInterval', { worker: { pollInterval: 10 } }, /unknown option; allowed here: enabled, pollIntervalMs/],
    ['workers', { workers: {} }, /unknown option/],
    ['worker', { worker: 5 }, /expected an object/],
    ['transactionResolver', { transactionResolver: 'cls' }, /expected a function/],
    ['dataSource', { dataSource: 42 }, /data source name or a TypeORM DataSource/],
    ['transports', { transports: {} }, /expected an array of transports/],
    ['transports[0]', { transports: [{ name: 'x' }] }, /send\(message, route\) method/],
    ['transports[1].name', { transports: [transport('a'), transport('a')] }, /already named "a"/],
    ['transports[0].name', { transports: [transport('has space')] }, /1 to 64 characters/],
    [
      'routes[0].transport',
      { transports: [transport('rabbit')], routes: [{ topic: 'a', transport: 'kafka' }] },
      /unknown transport "kafka"; the module's transports are: rabbit/,
    ],
    ['routes[0].transport', { routes: [{ topic: 'a', transport: 'x' }] }, /\(none\)/],
    [
      'routes[0].retry.maxAttempts',
      { transports: [transport('t')], routes: [{ topic: '#', transport: 't', retry: { maxAttempts: 0 } }] },
      /from 1 to 100/,
    ],
    ['redactError', { redactError: 'mask' }, /expected a function/],
    [
      'routes[0].topic',
      { transports: [transport('t')], routes: [{ topic: 'order..x', transport: 't' }] },
      /segment ""/,
    ],
    [
      'routes[0].timeoutMs',
      {
        worker: { renewLease: false },
        transports: [transport('t')],
        routes: [{ topic: '#', transport: 't', timeoutMs: 120_000 }],
      },
      /from 1 to 60000/,
    ],
    ['ordering', { ordering: { topic: 'order.*' } }, /expected an array such as \[\{ topic: 'order.\*' \}\]/],
    ['ordering[0].topic', { ordering: [{ topic: 'order.' }] }, /segment ""/],
    [
      'ordering[1].deadHead',
      { ordering: [{ topic: 'a' }, { topic: 'b', deadHead: 'drop' }] },
      /'block'.*'skip'.*"drop"/,
    ],
    ['ordering[0].key', { ordering: [{ topic: 'a', key: 'id' }] }, /unknown option; allowed here: topic, deadHead/],
    [
      'routes[0].url',
      { transports: [transport('t')], routes: [{ topic: '#', transport: 't', url: 'http://x' }] },
      /unknown option; allowed here: topic, transport, options/,
    ],
  ])('rejects %s in %j', (option, options, message) => {
    const error = rejection(options);
    expect(error.option).toBe(option);
    expect(error.message).toContain(`"${option}"`);
    expect(error.message).toMatch(message);
  });
});
