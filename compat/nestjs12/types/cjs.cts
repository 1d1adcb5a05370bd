// A CommonJS module: `require` (and `import` compiled to it) must get the CommonJS declarations (dist/), real types, not `any`.
import { OutboxModule, type OutboxMessage } from 'nestjs-typeorm-outbox';

// @ts-expect-error forRoot takes an options object: with `any` (a declaration that did not resolve) this is no error
OutboxModule.forRoot(42);
export const topic = (message: OutboxMessage<{ id: string }>): string => message.topic + message.payload.id;
