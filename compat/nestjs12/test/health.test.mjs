import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { OutboxHealthIndicator, OutboxNonRetryableError } from 'nestjs-typeorm-outbox';
import { BACKENDS } from '../support/databases.mjs';
import { handlerClass, startApp } from '../support/app.mjs';

class Doomed {
  async handle() {
    throw new OutboxNonRetryableError('the order is gone');
  }
}
handlerClass(Doomed, 'handle', 'health.doomed');

for (const backend of BACKENDS) {
  describe(`the health indicator under @nestjs/terminus 12 on ${backend}`, () => {
    let app;
    afterEach(() => app?.dispose());

    it('is up with the figures, and down once dead letters are more than allowed', async () => {
      app = await startApp(backend, { imports: [TerminusModule], providers: [Doomed], outbox: { worker: { enabled: false } } });
      const health = app.context.get(HealthCheckService);
      const indicator = app.context.get(OutboxHealthIndicator);
      const check = () => health.check([() => indicator.isHealthy('outbox', { maxDeadLetters: 0 })]);

      const up = await check();
      assert.equal(up.status, 'ok');
      assert.deepEqual(
        { status: up.details.outbox.status, worker: up.details.outbox.worker, due: up.details.outbox.due },
        { status: 'up', worker: 'disabled', due: 0 },
      );

      await app.txHost.withTransaction(() => app.outbox.publish('health.doomed', { n: 1 }));
      await app.worker.drain();
      await assert.rejects(check(), (error) => {
        const result = error.getResponse();
        assert.equal(result.status, 'error');
        assert.equal(result.error.outbox.status, 'down');
        assert.equal(result.error.outbox.dead, 1);
        assert.deepEqual(result.error.outbox.problems, ['1 dead letters (more than 0)']);
        return true;
      });
    });
  });
}
