import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module';
import { brokerClient } from './broker.config';
import { databaseOptions } from './database.config';
import { runDemo } from './demo';

async function bootstrap(): Promise<void> {
  const database = databaseOptions(process.env.DATABASE_URL);
  const broker = brokerClient(process.env.BROKER_URL);
  // abortOnError: false lets a failed start reach the catch below instead of aborting the process.
  const app = await NestFactory.create(AppModule.forRoot(database, broker), { abortOnError: false });
  // On SIGINT/SIGTERM, app.close() lets the outbox worker finish its in-flight deliveries.
  app.enableShutdownHooks();

  if (process.argv.includes('--demo')) {
    await app.init();
    const ok = await runDemo(app);
    await app.close();
    process.exitCode = ok ? 0 : 1;
    return;
  }

  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port);
  new Logger('Bootstrap').log(`Orders service listening on http://localhost:${port}`);
}

bootstrap().catch((error: unknown) => {
  console.error(`The sample failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
