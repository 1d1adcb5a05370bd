import { Module } from '@nestjs/common';
import { DeliveryLogHandler } from './delivery-log.handler';
import { EmailNotificationHandler } from './email-notification.handler';

@Module({
  providers: [DeliveryLogHandler, EmailNotificationHandler],
  exports: [EmailNotificationHandler],
})
export class NotificationsModule {}
