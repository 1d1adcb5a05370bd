/**
 * Does the suite catch bugs? Every store contract must hold on the real store, and each deliberately
 * broken variant of the store must be caught — by the clause of the contract aimed at its bug, not by
 * an unrelated error — on every backend.
 */
import { describeError } from '../../lib/utils/describe-error';
import { backends } from '../fixtures/backends';
import { createTestApp, type TestApp } from '../fixtures/test-app';
import {
  attemptIsCountedAtClaim,
  type Contract,
  ContractBreach,
  CONTRACTS,
  foreignAcknowledgementIsRejected,
  lateAcknowledgementIsRejected,
  liveLeaseIsNotClaimedTwice,
  rolledBackPublishDoesNotExist,
} from './broken-store/contracts';
import { VARIANTS, type PlantedVariant, type StoreVariant } from './broken-store/variants';

interface Catch {
  variant: StoreVariant;
  contract: Contract;
  /** The clause whose expectation must fail. */
  clause: string;
}

const CATCHES: Catch[] = [
  {
    variant: VARIANTS.ackWithoutToken,
    contract: lateAcknowledgementIsRejected,
    clause: lateAcknowledgementIsRejected.clauses.refused,
  },
  {
    variant: VARIANTS.ackWithoutToken,
    contract: foreignAcknowledgementIsRejected,
    clause: foreignAcknowledgementIsRejected.clauses.refused,
  },
  {
    variant: VARIANTS.claimIgnoresLease,
    contract: liveLeaseIsNotClaimedTwice,
    clause: liveLeaseIsNotClaimedTwice.clauses.notClaimed,
  },
  {
    variant: VARIANTS.publishAutocommits,
    contract: rolledBackPublishDoesNotExist,
    clause: rolledBackPublishDoesNotExist.clauses.noEvent,
  },
  {
    variant: VARIANTS.attemptsNotCounted,
    contract: attemptIsCountedAtClaim,
    clause: attemptIsCountedAtClaim.clauses.first,
  },
];

/** The breach the contract reports, or an error saying why that is not what happened. */
async function breachOf(contract: Contract, app: TestApp): Promise<ContractBreach> {
  const outcome = await contract(app).then(
    () => undefined,
    (error: unknown) => error,
  );
  if (outcome instanceof ContractBreach) return outcome;
  throw new Error(
    outcome === undefined
      ? `"${contract.title}" held: the variant went unnoticed`
      : `"${contract.title}" failed for another reason than a broken clause: ${describeError(outcome)}`,
    { cause: outcome },
  );
}

describe.each(backends())('broken store variants on %s', (backend) => {
  let app: TestApp | undefined;
  let planted: PlantedVariant | undefined;

  afterEach(async () => {
    try {
      await planted?.restore();
    } finally {
      planted = undefined;
      await app?.dispose();
      app = undefined;
    }
  });

  it.each(CONTRACTS.map((contract) => [contract.title, contract] as const))(
    'the real store keeps: %s',
    async (_title, contract) => {
      app = await createTestApp({ backend });
      await contract(app);
    },
  );

  it.each(CATCHES.map((c) => [c.variant.name, c.contract.title, c] as const))(
    '%s is caught by: %s',
    async (_variant, _contract, { variant, contract, clause }) => {
      app = await createTestApp({ backend });
      planted = variant(app.store);
      const breach = await breachOf(contract, app);
      expect(breach.contract).toBe(contract.title);
      expect(breach.clause).toBe(clause);
      // The broken code ran: the breach is the variant's doing.
      expect(planted.applied()).toBeGreaterThan(0);
    },
  );
});
