/**
 * Contracts of the outbox store, each an async function of a fresh test app that throws when the
 * contract is broken. The checks that carry the contract are named clauses: a failing one throws a
 * `ContractBreach` naming it, so a test can tell "caught by this clause" from a crash or a failed
 * set-up step (those throw as they are).
 */
import { randomUUID } from 'node:crypto';
import type { BackendName } from '../../fixtures/backends';
import { outboxRows, type TestApp } from '../../fixtures/test-app';

/** A failed expectation of a contract clause; `matcherResult` is the failed expectation's. */
export class ContractBreach extends Error {
  readonly matcherResult: unknown;

  constructor(
    readonly contract: string,
    readonly clause: string,
    failed: Error & { matcherResult?: unknown },
  ) {
    super(`Contract "${contract}" is broken: ${clause}\n\n${failed.message}`, { cause: failed });
    this.name = 'ContractBreach';
    this.matcherResult = failed.matcherResult;
  }
}

export interface Contract<Clause extends string = string> {
  (app: TestApp): Promise<void>;
  readonly title: string;
  /** What each clause promises, by key. */
  readonly clauses: Readonly<Record<Clause, string>>;
}

type Holds<Clause extends string> = (clause: Clause, assertion: () => void) => void;

/** A failed jest expectation, as opposed to any other error. */
function isFailedExpectation(error: unknown): error is Error & { matcherResult: unknown } {
  return error instanceof Error && 'matcherResult' in error;
}

function contract<Clause extends string>(
  title: string,
  clauses: Record<Clause, string>,
  check: (app: TestApp, holds: Holds<Clause>) => Promise<void>,
): Contract<Clause> {
  const holds: Holds<Clause> = (clause, assertion) => {
    try {
      assertion();
    } catch (error) {
      throw isFailedExpectation(error) ? new ContractBreach(title, clauses[clause], error) : error;
    }
  };
  return Object.assign((app: TestApp) => check(app, holds), { title, clauses });
}

/* ------------------------------------------------------------------------------------------------ */

const LONG_LEASE_MS = 60_000;

const idsOf = (events: Array<{ id: string }>) => events.map((event) => event.id);

/** Publishes one event and claims it with a long lease; `claim` claims again with the same arguments. */
async function claimedEvent(app: TestApp, topic: string, maxAttempts = 5) {
  const store = app.store;
  const claim = () => store.claim({ batchSize: 10, leaseMs: LONG_LEASE_MS, maxAttempts });
  const { id } = await app.txHost.withTransaction(() => app.outbox.publish(topic, { contract: topic }));
  const first = await claim();
  expect(idsOf(first.events)).toEqual([id]);
  return { store, claim, id, first };
}

async function rowOf(app: TestApp, id: string): Promise<Record<string, unknown>> {
  const [row] = await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id]);
  if (!row) throw new Error(`outbox row ${id} is missing`);
  return row;
}

/** A minute before the database's now, in the layout each backend stores. */
const MINUTE_AGO: Record<BackendName, string> = {
  postgres: `now() - interval '1 minute'`,
  mariadb: 'UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE',
  sqlite3: `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')`,
  'better-sqlite3': `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')`,
};

/**
 * Ends every live lease by the database clock, as if its worker had crashed a minute ago: faster and
 * more certain than waiting out a short lease, and the same comparison with the database's now.
 */
async function expireLeases(app: TestApp): Promise<void> {
  await app.raw.query(
    `UPDATE "${app.table}" SET "available_at" = ${MINUTE_AGO[app.backend]} ` +
      `WHERE "status" = 'pending' AND "claim_token" IS NOT NULL`,
  );
}

/* ------------------------------------------------------------------------------------------------ */

export const lateAcknowledgementIsRejected = contract(
  'a late acknowledgement from an expired lease is rejected',
  {
    refused: "the expired claim's acknowledgement changes no row",
    keptByNewClaim: 'the row stays pending under the new claim',
  },
  async (app, holds) => {
    const { store, claim, id, first } = await claimedEvent(app, 'contract.late-ack');
    // The first worker is still busy when its lease runs out; another worker claims the event.
    await expireLeases(app);
    const second = await claim();
    expect(idsOf(second.events)).toEqual([id]);

    const late = await store.acknowledge([id], first.token);
    holds('refused', () => expect(late).toBe(0));
    const row = await rowOf(app, id);
    holds('keptByNewClaim', () => expect(row).toMatchObject({ status: 'pending', claim_token: second.token }));
    // The fence refuses only the old claim.
    expect(await store.acknowledge([id], second.token)).toBe(1);
  },
);

export const foreignAcknowledgementIsRejected = contract(
  "an acknowledgement with another claim's token is rejected",
  {
    refused: 'an acknowledgement with a token that never claimed the row changes nothing',
    keptByClaim: 'the row stays pending under its claim',
  },
  async (app, holds) => {
    const { store, id, first: claimed } = await claimedEvent(app, 'contract.foreign-ack');

    const foreign = await store.acknowledge([id], randomUUID());
    holds('refused', () => expect(foreign).toBe(0));
    const row = await rowOf(app, id);
    holds('keptByClaim', () => expect(row).toMatchObject({ status: 'pending', claim_token: claimed.token }));
  },
);

export const liveLeaseIsNotClaimedTwice = contract(
  'a live lease is not claimed twice',
  {
    notClaimed: 'a second claim takes nothing while the first lease is live',
    keptByFirst: 'the row stays under the first claim',
  },
  async (app, holds) => {
    const { claim, id, first } = await claimedEvent(app, 'contract.live-lease');

    const second = await claim();
    holds('notClaimed', () =>
      expect({ events: idsOf(second.events), deadLettered: idsOf(second.deadLettered) }).toEqual({
        events: [],
        deadLettered: [],
      }),
    );
    const row = await rowOf(app, id);
    holds('keptByFirst', () => expect(row).toMatchObject({ status: 'pending', claim_token: first.token }));
  },
);

class BusinessRuleFailed extends Error {}

export const rolledBackPublishDoesNotExist = contract(
  'an event published in a transaction that rolls back does not exist',
  {
    noEvent: 'no event is left after the rollback',
  },
  async (app, holds) => {
    const orderId = `order-${randomUUID()}`;
    await expect(
      app.txHost.withTransaction(async () => {
        await app.outbox.publish('contract.rolled-back', { orderId });
        await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), [
          orderId,
          'rolled back',
        ]);
        throw new BusinessRuleFailed('the business rule fails after publishing');
      }),
    ).rejects.toBeInstanceOf(BusinessRuleFailed);

    // Asked through the store's own connection first: on SQLite that queues behind anything that
    // waited for the connection the rolled-back transaction held.
    const counts = await app.outbox.counts();
    holds('noEvent', () =>
      expect(counts).toEqual({ pending: 0, due: 0, scheduled: 0, inFlight: 0, delivered: 0, dead: 0 }),
    );
    const rows = await outboxRows(app);
    holds('noEvent', () => expect(rows).toEqual([]));
    expect(await app.raw.query(`SELECT * FROM "${app.ordersTable}"`)).toEqual([]);
  },
);

export const attemptIsCountedAtClaim = contract(
  'an attempt is counted when it is claimed',
  {
    first: 'the first claim counts attempt 1',
    afterCrash: 'the claim after a crash counts attempt 2',
    deadLettered: "the claim after the final attempt's lease ran out dead-letters the event",
  },
  async (app, holds) => {
    const { claim, id, first } = await claimedEvent(app, 'contract.crashes', 2);
    const afterFirst = await rowOf(app, id);
    holds('first', () => expect([first.events[0].attempts, afterFirst.attempts]).toEqual([1, 1]));

    // The worker dies before acknowledging, failing or releasing: only the lease ends it.
    await expireLeases(app);
    const second = await claim();
    expect(idsOf(second.events)).toEqual([id]);
    const afterSecond = await rowOf(app, id);
    holds('afterCrash', () => expect([second.events[0].attempts, afterSecond.attempts]).toEqual([2, 2]));

    await expireLeases(app);
    const third = await claim();
    const dead = await rowOf(app, id);
    holds('deadLettered', () => {
      expect({ events: idsOf(third.events), deadLettered: idsOf(third.deadLettered) }).toEqual({
        events: [],
        deadLettered: [id],
      });
      expect(dead).toMatchObject({ status: 'dead', attempts: 2, claim_token: null });
      expect(dead.processed_at).not.toBeNull();
      // The dead letter says why: the claim notes the expired final attempt (last_error keeps handler errors).
      expect(dead.note).toEqual(expect.any(String));
    });
  },
);

export const CONTRACTS: Contract[] = [
  lateAcknowledgementIsRejected,
  foreignAcknowledgementIsRejected,
  liveLeaseIsNotClaimedTwice,
  rolledBackPublishDoesNotExist,
  attemptIsCountedAtClaim,
];
