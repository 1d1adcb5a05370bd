// An ES module of a NestJS 12 app: `import` must get the ESM declarations (dist/esm/), real types, not `any`.
import { OutboxModule, type OutboxMessage } from 'nestjs-typeorm-outbox';

// @ts-expect-error forRoot takes an options object: with `any` (a declaration that did not resolve) this is no error
OutboxModule.forRoot(42);
export const topic = (message: OutboxMessage<{ id: string }>): string => message.topic + message.payload.id;
