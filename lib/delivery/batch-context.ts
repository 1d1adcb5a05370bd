import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxStore } from '../store/outbox.store';
import type { DeliveryLedger } from './delivery-ledger';
import type { DeliveryTargets } from './delivery-targets';
import type { HandlerInvoker } from './handler-invoker';
import type { Lanes } from './lanes';
import type { OutcomeRecorder } from './outcome-recorder';

/** What every claimed batch of one worker works with. */
export interface BatchContext {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxStore;
  readonly targets: DeliveryTargets;
  readonly ledger: DeliveryLedger;
  readonly recorder: OutcomeRecorder;
  readonly invoker: HandlerInvoker;
  /** Shared by every claim of the worker running at once. */
  readonly lanes: Lanes;
}
