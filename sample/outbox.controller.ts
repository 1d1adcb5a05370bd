import { Controller, Get } from '@nestjs/common';
import { OutboxService, type OutboxCounts } from '../lib';

@Controller('outbox')
export class OutboxController {
  constructor(private readonly outbox: OutboxService) {}

  /** How many events are pending, in flight, delivered and dead-lettered. */
  @Get()
  counts(): Promise<OutboxCounts> {
    return this.outbox.counts();
  }
}
