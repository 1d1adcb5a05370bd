export { OutboxModule } from './outbox.module';
export type { OutboxModuleExtras } from './outbox.module-definition';
export { OutboxService } from './publishing/outbox.service';
export { OutboxOperations } from './operations/outbox-operations.service';
export { requireChanged } from './operations/require-changed';
export type {
  OutboxAttemptView,
  OutboxEventDetails,
  OutboxEventFilter,
  OutboxEventPage,
  OutboxEventState,
  OutboxEventView,
  OutboxFailureGroup,
  OutboxBlockedKey,
  OutboxBlockedKeysOptions,
  OutboxOperationOptions,
  OutboxOperationResult,
  OutboxPageRequest,
  OutboxRedriveOptions,
  OutboxSelection,
  OutboxSkippedEvent,
  OutboxStats,
  OutboxStatsOptions,
  OutboxTopicStats,
} from './interfaces/outbox-operations.interface';
export { OutboxWorker, type OutboxDrainResult, type OutboxPurgeResult } from './delivery/outbox.worker';
export { currentOutboxMessage, type OutboxMessageContext } from './delivery/delivery-context';
export { OutboxEvents } from './events/outbox-events';
export {
  OutboxHealthIndicator,
  type OutboxHealthDetails,
  type OutboxHealthOptions,
  type OutboxHealthResult,
  type OutboxHealthThresholds,
  type OutboxStateLimits,
} from './observability/outbox-health.indicator';
export type {
  OutboxMeterProvider,
  OutboxMetricsOptions,
  OutboxPrometheusRegistry,
} from './interfaces/outbox-metrics.interface';
export type { OutboxTracingOptions } from './interfaces/outbox-tracing.interface';
export type {
  OutboxClaimedEvent,
  OutboxDeadLetteredEvent,
  OutboxDeadLetterReason,
  OutboxDeliveredEvent,
  OutboxHandlerFailedEvent,
  OutboxHandlerSucceededEvent,
  OutboxLeaseLostEvent,
  OutboxLifecycleEvent,
  OutboxLifecycleEventType,
  OutboxPublishedEvent,
  OutboxReleasedEvent,
  OutboxReleaseReason,
  OutboxRetryScheduledEvent,
  OutboxWakeUpLostEvent,
  OutboxWakeUpRestoredEvent,
  OutboxKeyBlockedEvent,
  OutboxKeyUnblockedEvent,
  OutboxAdminActionEvent,
  OutboxWorkerStartedEvent,
  OutboxWorkerStoppedEvent,
} from './events/lifecycle-event';
export { OutboxHandler } from './decorators/outbox-handler.decorator';
export {
  OUTBOX_DEFAULTS,
  type OutboxModuleOptions,
  type OutboxRetentionOptions,
  type OutboxRetryOptions,
  type OutboxTransactionResolver,
  type OutboxWorkerOptions,
} from './outbox.options';
export type {
  OutboxCounts,
  OutboxHandlerOptions,
  OutboxMessage,
  PublishManyItem,
  PublishOptions,
  PublishResult,
} from './interfaces/outbox-message.interface';
export type { OutboxRoute, OutboxTransport } from './interfaces/outbox-transport.interface';
export type { OutboxDeadHeadPolicy, OutboxOrdering } from './interfaces/outbox-ordering.interface';
export {
  ClientProxyTransport,
  type ClientProxyTransportOptions,
  type OutboxClientProxy,
} from './transports/client-proxy/client-proxy.transport';
export type { OutboxWakeUpChannel, OutboxWakeUpReport, OutboxWakeUpSide } from './interfaces/outbox-wake-up.interface';
export { ClientProxyWakeUp, type ClientProxyWakeUpOptions } from './wake-up/client-proxy-wake-up';
export { WebhookTransport, type WebhookEnvelope } from './transports/webhook/webhook.transport';
export type { WebhookTransportOptions } from './transports/webhook/webhook-options';
export { verifyWebhookSignature } from './transports/webhook/webhook-signature';
export { InMemoryTransport, type RecordedOutboxMessage } from './transports/in-memory.transport';
export {
  OutboxTesting,
  OutboxTestHarness,
  type OutboxHandlerRecord,
  type OutboxOverridableBuilder,
} from './testing/outbox-testing';
export { OutboxEventEntity, createOutboxEntity, type OutboxEventEntityClass } from './schema/outbox-event.entity';
export type {
  OutboxAttemptOutcome,
  OutboxAttemptRecord,
  OutboxEventRecord,
  OutboxStatus,
} from './interfaces/outbox-event-record.interface';
export { OutboxMigration, createOutboxMigration, type OutboxMigrationClass } from './schema/outbox.migration';
export { OutboxMigrations, createOutboxMigrations } from './schema/outbox-migrations';
export { OutboxInboxMigrations, createOutboxInboxMigrations } from './schema/inbox-migrations';
export { OutboxAdminMigrations, createOutboxAdminMigrations } from './schema/admin-migrations';
export { OutboxAdminModule, type OutboxAdminModuleAsyncOptions } from './admin/outbox-admin.module';
export type {
  OutboxAdminAccessOptions,
  OutboxAdminBehaviour,
  OutboxAdminModuleOptions,
  OutboxAdminShownEvent,
} from './admin/admin-options';
export {
  OutboxAdminService,
  type OutboxAdminAction,
  type OutboxAdminBadge,
  type OutboxAdminEventDetails,
  type OutboxAdminListedEvent,
} from './admin/outbox-admin.service';
export type { OutboxAdminAuditEntry, OutboxAdminAuditPage } from './admin/admin-audit';
export { OutboxInboxModule, type OutboxInboxModuleAsyncOptions } from './inbox/outbox-inbox.module';
export type { OutboxInboxModuleOptions } from './inbox/inbox-options';
export { OutboxInboxService, type OutboxInboxOutcome } from './inbox/outbox-inbox.service';
export { OutboxInbox, type OutboxInboxOptions } from './inbox/outbox-inbox.decorator';
export { OutboxInboxInterceptor } from './inbox/outbox-inbox.interceptor';
export {
  OutboxConfigurationError,
  OutboxDedupeConflictError,
  OutboxError,
  OutboxEventNotFoundError,
  OutboxHandlerTimeoutError,
  OutboxHeadersTooLargeError,
  OutboxHttpError,
  OutboxInboxMessageError,
  OutboxLeaseLostError,
  OutboxNonRetryableError,
  OutboxPayloadTooLargeError,
  OutboxRetryLaterError,
  OutboxSchemaOutdatedError,
  OutboxShutdownError,
  OutboxStateConflictError,
  OutboxTableMissingError,
  OutboxTransactionRequiredError,
  OutboxUnsupportedDatabaseError,
  OutboxValidationError,
  OutboxWebhookSignatureError,
  OutboxAdminForbiddenError,
} from './errors/outbox.errors';
export { OutboxLogRecord, type OutboxLogFields } from './utils/log-record';
