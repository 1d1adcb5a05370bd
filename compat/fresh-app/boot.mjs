#!/usr/bin/env node
// Starts a built app the way its template does (`npm run start:prod`, PORT set to a free port), waits
// until GET / answers 200 (the template's AppController, which the quick start keeps), then stops it.
// This is the app under plain Node, compiled by tsc, next to the test runner's own TypeScript transform.
//   node boot.mjs <app dir>
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

const [appDir] = process.argv.slice(2);
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
  env: { ...process.env, PORT: String(port) },
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
stop();
const timer = setTimeout(() => {
  process.kill(-app.pid, 'SIGKILL');
}, 15_000);
await exit;
clearTimeout(timer);
process.stdout.write(`started, GET / answered 200 on port ${port} after ${Date.now() - started} ms, stopped\n`);
