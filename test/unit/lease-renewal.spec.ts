import { Logger } from '@nestjs/common';
import { performance } from 'node:perf_hooks';
import { OutboxEvents, type OutboxLifecycleEvent } from '../../lib';
import { DeliveryLedger } from '../../lib/delivery/delivery-ledger';
import { emptyResult } from '../../lib/delivery/drain-result';
import { LazyAbort } from '../../lib/delivery/lazy-abort';
import { LeaseRenewal, renewalIntervalMs } from '../../lib/delivery/lease-renewal';
import { OutcomeRecorder } from '../../lib/delivery/outcome-recorder';
import type { RenewalArgs } from '../../lib/dialects/shared/outbox-dialect.interface';
import type { ResolvedOutboxOptions } from '../../lib/interfaces/outbox-options.interface';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { ErrorText } from '../../lib/utils/error-text';
import { eventually } from '../fixtures/eventually';

const LEASE_MS = 60;

/** A store whose renewal keeps every id but those in `lost`; `answer` may replace it. */
function fakeStore() {
  const lost = new Set<string>();
  const calls: RenewalArgs[] = [];
  let answer: (args: RenewalArgs) => Promise<string[]> = (args) =>
    Promise.resolve(args.ids.filter((id) => !lost.has(id)));
  const store = {
    renew: async (ids: string[], token: string, leaseMs: number) => {
      const args: RenewalArgs = { ids, token, leaseMs };
      calls.push(args);
      return answer(args);
    },
  } as unknown as OutboxStore;
  return { store, lost, calls, answer: (next: typeof answer) => void (answer = next) };
}

describe('LeaseRenewal', () => {
  let renewal: LeaseRenewal | undefined;
  beforeAll(() => {
    Logger.overrideLogger(false);
  });
  afterAll(() => {
    Logger.overrideLogger(['log', 'error', 'warn']);
  });
  afterEach(async () => {
    await renewal?.stop();
    renewal = undefined;
  });

  function setUp() {
    const fake = fakeStore();
    const ledger = new DeliveryLedger();
    const events = new OutboxEvents();
    const seen: OutboxLifecycleEvent[] = [];
    events.events$.subscribe((e) => seen.push(e));
    const total = emptyResult();
    const scope = { token: 'T', total };
    const running = new LazyAbort();
    const gaveUp = jest.fn();
    running.onGiveUp = { gaveUp };
    ledger.claimed(scope, [{ id: 'waiting' }], []);
    ledger.started('running', 'T', [running]);
    // Another claim's event: never renewed by this one.
    ledger.started('other', 'U', []);
    // The recorder reads its options only to record a failed delivery, which a renewal never does, and
    // to describe the error of a failed renewal.
    const options = { errorText: new ErrorText() } as ResolvedOutboxOptions;
    const recorder = new OutcomeRecorder(options, fake.store, events, ledger, new Logger('OutboxWorker'));
    renewal = new LeaseRenewal(scope, performance.now(), LEASE_MS, { store: fake.store, ledger, recorder });
    return { ...fake, ledger, seen, total, running, gaveUp, renewal };
  }

  it('renews every third of the lease, in one call for the waiting and running events of its claim', async () => {
    expect(renewalIntervalMs(60_000)).toBe(20_000);
    const { calls, ledger } = setUp();
    await eventually(() => calls.length >= 2, 2000, 'two renewals');
    expect(calls[0]).toEqual({ ids: ['waiting', 'running'], token: 'T', leaseMs: LEASE_MS });
    expect(ledger.renewalCount).toBe(1);
  });

  it('gives up an event it no longer holds: aborts its handlers, counts and reports the lost lease', async () => {
    const { lost, total, running, gaveUp, seen, ledger, renewal: r } = setUp();
    lost.add('running');
    await eventually(() => total.lostLeases === 1, 2000, 'the lost lease');
    expect(r.isLost('running')).toBe(true);
    expect(r.isLost('waiting')).toBe(false);
    expect(running.signal.aborted).toBe(true);
    expect(running.signal.reason).toMatchObject({ name: 'OutboxLeaseLostError' });
    expect(gaveUp).toHaveBeenCalledWith(running.signal.reason);
    expect(seen).toEqual([
      { type: 'lease.lost', at: expect.any(Date) as Date, ids: ['running'], count: 1, what: 'renew' },
    ]);
    expect(ledger.isWaiting('waiting')).toBe(true);
  });

  it('takes a waiting event it lost off the queue, so it never starts', async () => {
    const { lost, total, ledger } = setUp();
    lost.add('waiting');
    await eventually(() => total.lostLeases === 1, 2000, 'the lost lease');
    expect(ledger.isWaiting('waiting')).toBe(false);
  });

  it('does not count an event that finished while the renewal was on its way', async () => {
    const { answer, ledger, total, calls } = setUp();
    answer((args) => {
      // Its outcome is being written meanwhile: the row no longer matches the renewal.
      ledger.ended('running', 'T');
      return Promise.resolve(args.ids.filter((id) => id !== 'running'));
    });
    await eventually(() => calls.length >= 2, 2000, 'two renewals');
    expect(total.lostLeases).toBe(0);
  });

  it('keeps the lease it knows when a renewal fails, and tries again', async () => {
    const { answer, calls, total, renewal: r } = setUp();
    answer(() => Promise.reject(new Error('connection refused')));
    await eventually(() => calls.length >= 3, 2000, 'three tries');
    expect(total.lostLeases).toBe(0);
    expect(r.leaseLeftMs()).toBeLessThan(0);
  });

  it('issues nothing once the worker has closed, and stop() waits for the renewal on its way', async () => {
    const { answer, calls, ledger, renewal: r } = setUp();
    let finish!: () => void;
    answer((args) => new Promise((resolve) => (finish = () => resolve(args.ids))));
    await eventually(() => calls.length === 1, 2000, 'a renewal on its way');
    let stopped = false;
    const stopping = r.stop().then(() => (stopped = true));
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
    expect(stopped).toBe(false);
    expect(calls).toHaveLength(1);
    finish();
    await stopping;
    expect(ledger.renewalCount).toBe(0);

    const again = setUp();
    again.ledger.close();
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
    expect(again.calls).toEqual([]);
    expect(again.ledger.renewalCount).toBe(0);
  });
});
