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

    it('stays up with a dead letter; the state check is down on it', async () => {
      app = await startApp(backend, {
        imports: [TerminusModule],
        providers: [Doomed],
        outbox: { worker: { enabled: false } },
      });
      const health = app.context.get(HealthCheckService);
      const indicator = app.context.get(OutboxHealthIndicator);
      const probe = () => health.check([() => indicator.isHealthy('outbox')]);
      const state = () => health.check([() => indicator.checkState('outboxState', { maxDeadLetters: 0 })]);

      const up = await probe();
      assert.equal(up.status, 'ok');
      assert.deepEqual(
        { status: up.details.outbox.status, worker: up.details.outbox.worker, due: up.details.outbox.due },
        { status: 'up', worker: 'disabled', due: 0 },
      );

      await app.txHost.withTransaction(() => app.outbox.publish('health.doomed', { n: 1 }));
      await app.worker.drain();
      const still = await probe();
      assert.equal(still.status, 'ok');
      assert.deepEqual(
        { status: still.details.outbox.status, dead: still.details.outbox.dead },
        { status: 'up', dead: 1 },
      );
      await assert.rejects(state(), (error) => {
        const result = error.getResponse();
        assert.equal(result.status, 'error');
        assert.equal(result.error.outboxState.status, 'down');
        assert.equal(result.error.outboxState.dead, 1);
        assert.deepEqual(result.error.outboxState.problems, ['1 dead letter (more than 0)']);
        return true;
      });
    });
  });
}
