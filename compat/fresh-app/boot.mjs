#!/usr/bin/env node
// Starts a built app the way its template does (`npm run start:prod`, PORT set to a free port), waits
// until GET / answers 200 (the template's AppController, which the quick start keeps), then stops it.
// This is the app under plain Node, compiled by tsc, next to the test runner's own TypeScript transform.
// With --trace (the app has docs/observability.md's tracing set up), it then places an order (POST /orders,
// as the quick start's controller takes it) with the spans printed (OTEL_TRACES_EXPORTER=console) and checks
// that the request's trace reaches the handler: the HTTP server span, `create order.placed` under it, and
// `process order.placed` under that, in one trace.
//   node boot.mjs <app dir> [--trace]
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

const [appDir, mode] = process.argv.slice(2);
const tracing = mode === '--trace';
const DEADLINE_MS = 60_000;

const port = await new Promise((resolve, reject) => {
  const server = createServer().listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  });
  server.on('error', reject);
});

// A process group of its own, so that stopping it stops npm's child too.
const app = spawn('npm', ['run', 'start:prod'], {
  cwd: appDir,
  env: {
    ...process.env,
    PORT: String(port),
    ...(tracing ? { OTEL_TRACES_EXPORTER: 'console', OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none' } : {}),
  },
  detached: true,
  stdio: ['ignore', 'pipe', 'pipe'],
});
let output = '';
app.stdout.on('data', (chunk) => (output += chunk));
app.stderr.on('data', (chunk) => (output += chunk));
let exited = null;
const exit = new Promise((resolve) => app.on('exit', (code, signal) => resolve((exited = signal ?? code))));

function stop() {
  try {
    process.kill(-app.pid, 'SIGTERM');
  } catch {
    // already gone
  }
}

/** Whether a process of the app's group is still running. */
function groupAlive() {
  try {
    process.kill(-app.pid, 0);
    return true;
  } catch {
    return false;
  }
}

function fail(message) {
  stop();
  process.stderr.write(`${output.replace(/\x1b\[[0-9;]*m/g, '').split('\n').slice(-40).join('\n')}\n`);
  process.stderr.write(`boot: ${message}\n`);
  process.exit(1);
}

const started = Date.now();
let answered = false;
while (!answered) {
  if (exited !== null) fail(`npm run start:prod ended (${exited}) before GET / on port ${port} answered`);
  if (Date.now() - started > DEADLINE_MS) fail(`GET / on port ${port} did not answer 200 within ${DEADLINE_MS / 1000} s`);
  try {
    const response = await fetch(`http://127.0.0.1:${port}/`);
    answered = response.status === 200;
    if (!answered) fail(`GET / on port ${port} answered ${response.status}`);
  } catch {
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
const report = tracing ? await traced() : '';
stop();
const timer = setTimeout(() => {
  process.kill(-app.pid, 'SIGKILL');
}, 15_000);
await exit;
clearTimeout(timer);
// npm is gone; the app it ran must be too: an app that outlives SIGTERM (a SIGTERM listener that does not
// exit replaces Node's default) would hang a deployment's stop, and this script on the pipes it holds.
const stopBy = Date.now() + 15_000;
while (groupAlive() && Date.now() < stopBy) await new Promise((resolve) => setTimeout(resolve, 100));
if (groupAlive()) {
  process.kill(-app.pid, 'SIGKILL');
  app.stdout.destroy();
  app.stderr.destroy();
  process.stderr.write('boot: the app was still running 15 s after SIGTERM (npm had exited); killed\n');
  process.exit(1);
}
process.stdout.write(`started, GET / answered 200 on port ${port} after ${Date.now() - started} ms${report}, stopped\n`);

/** The spans the console exporter printed (util.inspect of each): name, kind, trace, id and parent. */
function printedSpans() {
  const text = output.replace(/\x1b\[[0-9;]*m/g, '');
  return text
    .split(/^\{$/m)
    .slice(1)
    .map((block) => ({
      name: /^  name: '([^']*)'/m.exec(block)?.[1],
      kind: Number(/^  kind: (\d)/m.exec(block)?.[1]),
      traceId: /^  traceId: '(\w+)'/m.exec(block)?.[1],
      id: /^  id: '(\w+)'/m.exec(block)?.[1],
      parent: /^  parentSpanContext: \{[^}]*?spanId: '(\w+)'/m.exec(block)?.[1],
    }))
    .filter((span) => span.name && span.traceId && span.id);
}

/** Places an order and finds its trace, from the request to the handler; fails with what it saw otherwise. */
async function traced() {
  const response = await fetch(`http://127.0.0.1:${port}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ customer: 'ada', amount: 42 }),
  });
  if (response.status !== 201) fail(`POST /orders answered ${response.status}`);
  const deadline = Date.now() + DEADLINE_MS;
  let spans = [];
  while (!spans.some((s) => s.name === 'process order.placed')) {
    if (exited !== null) fail(`npm run start:prod ended (${exited}) before the handler's span was printed`);
    if (Date.now() > deadline) fail(`no span "process order.placed" printed within ${DEADLINE_MS / 1000} s of POST /orders`);
    await new Promise((resolve) => setTimeout(resolve, 250));
    spans = printedSpans();
  }
  const SERVER = 1;
  const request = spans.find((s) => s.kind === SERVER && s.name.startsWith('POST'));
  const create = spans.find((s) => s.name === 'create order.placed');
  const processed = spans.find((s) => s.name === 'process order.placed');
  const seen = spans.map((s) => `${s.name} (kind ${s.kind}, trace ${s.traceId}, id ${s.id}, parent ${s.parent})`);
  if (!request || !create || create.parent !== request.id || create.traceId !== request.traceId) {
    fail(`expected "create order.placed" under the request's server span; printed:\n  ${seen.join('\n  ')}`);
  }
  if (processed.parent !== create.id || processed.traceId !== request.traceId) {
    fail(`expected "process order.placed" under "create order.placed", in the request's trace; printed:\n  ${seen.join('\n  ')}`);
  }
  return `; POST /orders → create order.placed → process order.placed in trace ${request.traceId}`;
}
