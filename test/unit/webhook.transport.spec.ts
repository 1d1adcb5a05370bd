import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  OutboxConfigurationError,
  OutboxNonRetryableError,
  OutboxRetryLaterError,
  type OutboxMessage,
  type OutboxRoute,
} from '../../lib';
import type { WebhookTransportOptions } from '../../lib/transports/webhook/webhook-options';
import { verifyWebhookSignature } from '../../lib/transports/webhook/webhook-signature';
import { WebhookTransport, type WebhookEnvelope } from '../../lib/transports/webhook/webhook.transport';

interface Arrival {
  req: IncomingMessage;
  res: ServerResponse;
  body: string;
  /** Read on arrival: a closed socket no longer reports it. */
  clientPort: number | undefined;
  /** Settles when the server side of the exchange is closed (answered, or the client went away). */
  closed: Promise<unknown>;
}

type Responder = (arrival: Arrival) => void;

/** A real HTTP server on a free local port; each test says how it answers. */
class TestServer {
  readonly arrivals: Arrival[] = [];
  respond: Responder = ({ res }) => res.writeHead(204).end();
  private readonly server: Server;
  private waiters: Array<(arrival: Arrival) => void> = [];
  private port = 0;
  private taken = 0;

  constructor() {
    this.server = createServer((req, res) => {
      const closed = once(res, 'close');
      const clientPort = req.socket.remotePort;
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const arrival: Arrival = { req, res, body: Buffer.concat(chunks).toString('utf8'), clientPort, closed };
        this.arrivals.push(arrival);
        this.respond(arrival);
        const waiter = this.waiters.shift();
        if (waiter) {
          this.taken++;
          waiter(arrival);
        }
      });
    });
  }

  async start(): Promise<void> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as AddressInfo).port;
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  /** The next request to arrive after this call (or already arrived and not yet taken). */
  next(): Promise<Arrival> {
    if (this.taken < this.arrivals.length) return Promise.resolve(this.arrivals[this.taken++]);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  reset(): void {
    this.arrivals.length = 0;
    this.taken = 0;
    this.waiters = [];
    this.respond = ({ res }) => res.writeHead(204).end();
    // Connections stay open: closing them here races fetch's pool, which could hand the next test a
    // socket the server is just closing.
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }
}

const route: OutboxRoute = { topic: 'order.#', transport: 'hooks' };

function message(overrides: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id: '0190a6d2-3b5c-7c4e-9a1f-2b3c4d5e6f70',
    topic: 'order.placed',
    key: 'customer-42',
    payload: { orderId: 17, note: 'café ☕', lines: [{ sku: 'A-1', qty: 2 }] },
    headers: { 'trace-id': 'abc123' },
    attempt: 3,
    createdAt: new Date('2024-05-01T12:00:00.123Z'),
    signal: new AbortController().signal,
    ...overrides,
  };
}

/** The request `sending` makes, once it reaches the server; fails fast if the send settles first. */
function arrivalOf(server: TestServer, sending: Promise<unknown>): Promise<Arrival> {
  return Promise.race([
    server.next(),
    // A rejected send passes through as it is.
    sending.then(() => Promise.reject(new Error('the send resolved before its request arrived'))),
  ]);
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(Error);
    return error as Error;
  }
  throw new Error('expected the send to reject, but it resolved');
}

describe('WebhookTransport', () => {
  const server = new TestServer();
  beforeAll(() => server.start());
  afterEach(() => server.reset());
  afterAll(() => server.stop());

  const transport = (options: Partial<WebhookTransportOptions> = {}) =>
    new WebhookTransport('hooks', { url: server.url('/hook?tenant=7'), ...options });

  describe('a delivered request', () => {
    it('posts the JSON envelope with the outbox headers', async () => {
      const sending = transport({ headers: { Authorization: 'Bearer t0ken' } }).send(message(), route);
      const arrival = await arrivalOf(server, sending);
      await expect(sending).resolves.toBeUndefined();

      expect(arrival.req.method).toBe('POST');
      expect(arrival.req.url).toBe('/hook?tenant=7');
      expect(arrival.req.headers).toMatchObject({
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(arrival.body)),
        'idempotency-key': '0190a6d2-3b5c-7c4e-9a1f-2b3c4d5e6f70',
        'x-outbox-topic': 'order.placed',
        'x-outbox-attempt': '3',
        'x-outbox-key': 'customer-42',
        authorization: 'Bearer t0ken',
      });
      expect(arrival.req.headers['x-outbox-signature']).toBeUndefined();

      const envelope = JSON.parse(arrival.body) as WebhookEnvelope;
      expect(envelope).toEqual({
        id: '0190a6d2-3b5c-7c4e-9a1f-2b3c4d5e6f70',
        topic: 'order.placed',
        key: 'customer-42',
        createdAt: '2024-05-01T12:00:00.123Z',
        attempt: 3,
        headers: { 'trace-id': 'abc123' },
        payload: { orderId: 17, note: 'café ☕', lines: [{ sku: 'A-1', qty: 2 }] },
      });
      expect(Object.keys(envelope)).toEqual(['id', 'topic', 'key', 'createdAt', 'attempt', 'headers', 'payload']);
    });

    it('leaves out X-Outbox-Key for an event without a key, and sends key null in the body', async () => {
      const sending = transport().send(message({ key: null }), route);
      const arrival = await arrivalOf(server, sending);
      await sending;
      expect(arrival.req.headers['x-outbox-key']).toBeUndefined();
      expect((JSON.parse(arrival.body) as WebhookEnvelope).key).toBeNull();
    });

    it('accepts any 2xx and reads its body, so the connection goes back to the pool', async () => {
      // A body this size is not buffered along with the headers: a connection whose body is left
      // unread (or cancelled) cannot be reused, so every send would open a new one.
      server.respond = ({ res }) => res.writeHead(202, { 'Content-Type': 'text/plain' }).end('q'.repeat(32 * 1024));
      const webhook = transport();
      const sends = 6;
      for (let i = 0; i < sends; i++) await webhook.send(message({ attempt: i + 1 }), route);
      const sockets = new Set(server.arrivals.map(({ clientPort }) => clientPort));
      expect(sockets.size).toBeLessThan(sends);
    });

    it("sends to the route's options.url instead of the default URL", async () => {
      const sending = transport().send(message(), { ...route, options: { url: server.url('/override') } });
      const arrival = await arrivalOf(server, sending);
      await sending;
      expect(arrival.req.url).toBe('/override');
    });

    it('uses the fetch it is given', async () => {
      const seen: string[] = [];
      const webhook = transport({
        fetch: (input, init) => {
          seen.push(input instanceof Request ? input.url : String(input));
          return fetch(input, init);
        },
      });
      const sending = webhook.send(message(), route);
      await arrivalOf(server, sending);
      await sending;
      expect(seen).toEqual([server.url('/hook?tenant=7')]);
    });
  });

  describe('signatures', () => {
    const secret = 'whsec_test_5f2b';

    async function signedArrival(options: Partial<WebhookTransportOptions> = {}) {
      const sending = transport({ secret, ...options }).send(message(), route);
      const arrival = await arrivalOf(server, sending);
      await sending;
      return arrival;
    }

    it('signs "<t>.<body>" with HMAC-SHA256 in the documented format', async () => {
      const before = Math.floor(Date.now() / 1000);
      const arrival = await signedArrival();
      const header = arrival.req.headers['x-outbox-signature'] as string;
      const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
      expect(match).not.toBeNull();
      const [, t, v1] = match!;
      expect(Number(t)).toBeGreaterThanOrEqual(before);
      expect(Number(t)).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
      expect(v1).toBe(createHmac('sha256', secret).update(`${t}.${arrival.body}`).digest('hex'));
    });

    it('verifies with verifyWebhookSignature, and fails on a wrong secret, a changed body or an old timestamp', async () => {
      const arrival = await signedArrival();
      const header = arrival.req.headers['x-outbox-signature'] as string;

      expect(verifyWebhookSignature(arrival.body, header, secret)).toBe(true);
      expect(verifyWebhookSignature(Buffer.from(arrival.body, 'utf8'), header, secret)).toBe(true);
      expect(verifyWebhookSignature(arrival.body, header, 'whsec_other')).toBe(false);
      expect(verifyWebhookSignature(arrival.body.replace('"orderId":17', '"orderId":18'), header, secret)).toBe(false);
      // Re-serialised JSON is not the signed body.
      expect(verifyWebhookSignature(JSON.stringify(JSON.parse(arrival.body), null, 1), header, secret)).toBe(false);

      expect(verifyWebhookSignature(arrival.body, header, secret, 300, Date.now() + 200_000)).toBe(true);
      expect(verifyWebhookSignature(arrival.body, header, secret, 300, Date.now() + 302_000)).toBe(false);
      expect(verifyWebhookSignature(arrival.body, header, secret, 300, Date.now() - 302_000)).toBe(false);
      expect(verifyWebhookSignature(arrival.body, header, secret, 60, Date.now() + 120_000)).toBe(false);
    });

    it('rejects malformed headers instead of throwing', async () => {
      const arrival = await signedArrival();
      const header = arrival.req.headers['x-outbox-signature'] as string;
      const [t, v1] = header.split(',');
      for (const bad of ['', v1, t, `${t},v1=abc`, `${t},${t},${v1}`, `t=-1,${v1}`, `t=1e9,${v1}`, 'garbage']) {
        expect(verifyWebhookSignature(arrival.body, bad, secret)).toBe(false);
      }
      expect(verifyWebhookSignature(arrival.body, header, '')).toBe(false);
      // A second v1 (as during a secret rotation) does not spoil a matching one.
      expect(verifyWebhookSignature(arrival.body, `${t},v1=${'0'.repeat(64)},${v1}`, secret)).toBe(true);
    });

    it('uses the configured signature header', async () => {
      const arrival = await signedArrival({ signatureHeader: 'X-Acme-Signature' });
      expect(arrival.req.headers['x-outbox-signature']).toBeUndefined();
      expect(verifyWebhookSignature(arrival.body, arrival.req.headers['x-acme-signature'] as string, secret)).toBe(
        true,
      );
    });
  });

  describe('responses that dead-letter the event', () => {
    it.each([400, 404, 410, 422])('%i is non-retryable, naming status, path and body but no query', async (status) => {
      server.respond = ({ res }) => res.writeHead(status).end('no such hook\n  (tenant=7)');
      const error = await rejection(transport({ url: server.url('/hook?token=s3cret') }).send(message(), route));
      expect(error).toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toContain(String(status));
      expect(error.message).toContain(`${server.url('/hook')} `);
      expect(error.message).toContain('no such hook (tenant=7)');
      expect(error.message).not.toContain('s3cret');
      expect(error.message).not.toContain('?');
    });

    it('quotes at most 200 characters of the response body', async () => {
      server.respond = ({ res }) => res.writeHead(400).end('x'.repeat(50_000));
      const error = await rejection(transport().send(message(), route));
      expect(error.message).toContain('x'.repeat(200));
      expect(error.message).not.toContain('x'.repeat(201));
    });

    it.each([301, 302, 307, 308])('%i is non-retryable and not followed', async (status) => {
      server.respond = ({ res }) => res.writeHead(status, { Location: '/elsewhere?sig=s3cret' }).end();
      const error = await rejection(transport().send(message(), route));
      expect(error).toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toContain(String(status));
      expect(error.message).toMatch(/redirects are not followed/);
      expect(error.message).toContain(server.url('/elsewhere'));
      expect(error.message).not.toContain('s3cret');
      expect(server.arrivals).toHaveLength(1);
    });

    it('is non-retryable when neither the route nor the transport has a URL', async () => {
      const error = await rejection(new WebhookTransport('hooks', {}).send(message(), route));
      expect(error).toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toMatch(/no URL for route "order\.#".*transports\.hooks\.url.*options\.url/);
    });

    it.each([['ftp://example.com/in'], ['not a url'], [42]])(
      "is non-retryable when the route's url is %p",
      async (url) => {
        const error = await rejection(transport().send(message(), { ...route, options: { url } }));
        expect(error).toBeInstanceOf(OutboxNonRetryableError);
        expect(error.message).toMatch(/invalid options\.url/);
        expect(server.arrivals).toHaveLength(0);
      },
    );
  });

  describe('responses and failures that are retried', () => {
    it.each([408, 429, 500, 502, 503])('%i is retryable', async (status) => {
      server.respond = ({ res }) => res.writeHead(status).end('busy');
      const error = await rejection(transport().send(message(), route));
      expect(error).not.toBeInstanceOf(OutboxNonRetryableError);
      expect(error).not.toBeInstanceOf(OutboxRetryLaterError);
      expect(error.message).toContain(String(status));
      expect(error.message).toContain('busy');
      expect(error.message).not.toContain('tenant');
    });

    it.each([429, 503])('%i with Retry-After: 7 asks for 7000 ms', async (status) => {
      server.respond = ({ res }) => res.writeHead(status, { 'Retry-After': '7' }).end();
      const error = await rejection(transport().send(message(), route));
      expect(error).toBeInstanceOf(OutboxRetryLaterError);
      expect((error as OutboxRetryLaterError).retryAfterMs).toBe(7000);
      expect(error.message).toContain(String(status));
    });

    it('reads an HTTP-date Retry-After as the time until then', async () => {
      server.respond = ({ res }) =>
        res.writeHead(503, { 'Retry-After': new Date(Date.now() + 30_000).toUTCString() }).end();
      const error = await rejection(transport().send(message(), route));
      expect(error).toBeInstanceOf(OutboxRetryLaterError);
      // Both the Retry-After and the Date header have whole seconds.
      expect((error as OutboxRetryLaterError).retryAfterMs).toBeGreaterThanOrEqual(29_000);
      expect((error as OutboxRetryLaterError).retryAfterMs).toBeLessThanOrEqual(31_000);
    });

    it("measures an HTTP-date Retry-After from the response's Date, whatever the clocks say", async () => {
      server.respond = ({ res }) =>
        res
          .writeHead(429, { Date: 'Wed, 21 Oct 2015 07:28:00 GMT', 'Retry-After': 'Wed, 21 Oct 2015 07:28:42 GMT' })
          .end();
      const error = await rejection(transport().send(message(), route));
      expect((error as OutboxRetryLaterError).retryAfterMs).toBe(42_000);
    });

    it('falls back to a plain retry for a Retry-After it cannot read', async () => {
      server.respond = ({ res }) => res.writeHead(503, { 'Retry-After': 'soon' }).end();
      const error = await rejection(transport().send(message(), route));
      expect(error).not.toBeInstanceOf(OutboxRetryLaterError);
      expect(error).not.toBeInstanceOf(OutboxNonRetryableError);
    });

    it('gives up on a server that never answers after timeoutMs, and closes the request', async () => {
      server.respond = () => undefined;
      const sending = transport({ timeoutMs: 100 }).send(message(), route);
      const arrival = await arrivalOf(server, sending);
      const error = await rejection(sending);
      expect(error).not.toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toBe(`webhook request to ${server.url('/hook')} timed out after 100 ms`);
      await arrival.closed;
    });

    it('stops the request when message.signal aborts', async () => {
      server.respond = () => undefined;
      const controller = new AbortController();
      const sending = transport().send(message({ signal: controller.signal }), route);
      const arrival = await arrivalOf(server, sending);
      controller.abort(new Error('handler time is up'));
      const error = await rejection(sending);
      expect(error).not.toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toMatch(/was aborted: handler time is up/);
      await arrival.closed;
    });

    it('sends nothing when message.signal is already aborted', async () => {
      const controller = new AbortController();
      controller.abort();
      const error = await rejection(transport().send(message({ signal: controller.signal }), route));
      expect(error.message).toMatch(/was aborted/);
      expect(server.arrivals).toHaveLength(0);
    });

    it('retries when the connection is refused', async () => {
      const closed = new TestServer();
      await closed.start();
      const url = closed.url('/hook?token=s3cret');
      await closed.stop();
      const error = await rejection(transport({ url }).send(message(), route));
      expect(error).not.toBeInstanceOf(OutboxNonRetryableError);
      expect(error.message).toMatch(/^webhook request to http:\/\/127\.0\.0\.1:\d+\/hook failed: .*ECONNREFUSED/);
      expect(error.message).not.toContain('s3cret');
    });
  });

  describe('options', () => {
    it.each<[string, Record<string, unknown>, RegExp]>([
      ['url', { url: 'not a url' }, /absolute http/],
      ['url', { url: 'ftp://example.com/in' }, /scheme "ftp:"/],
      ['url', { url: '' }, /http:\/\/ or https:\/\/ URL/],
      ['url', { url: 'https://user:pa55@example.com/in' }, /credentials.*headers\.Authorization/],
      ['timeoutMs', { timeoutMs: 0 }, /from 1 to .*got 0/],
      ['timeoutMs', { timeoutMs: NaN }, /got NaN/],
      ['timeoutMs', { timeoutMs: 1.5 }, /whole number/],
      ['timeoutMs', { timeoutMs: '100' }, /the string "100"/],
      ['secret', { secret: '' }, /non-empty string/],
      ['secret', { signatureHeader: 'X-Sig' }, /secret is missing/],
      ['signatureHeader', { secret: 's', signatureHeader: 'X Sig' }, /header name/],
      ['headers', { headers: { 'X-Tenant': 7 } }, /"X-Tenant" must be a string.*got a number/],
      ['headers', { headers: { Authorization: undefined } }, /unset environment variable/],
      ['headers', { headers: { 'X-Evil': 'a\r\nb' } }, /without NUL, CR or LF/],
      ['headers', { headers: { 'idempotency-key': 'x' } }, /set by the webhook transport/],
      ['headers', { headers: { 'bad name': 'x' } }, /not a valid header name/],
      ['fetch', { fetch: 'undici' }, /fetch function/],
      ['retries', { retries: 3 }, /unknown option; allowed here: url, timeoutMs/],
    ])('rejects %s in %p', (option, options, problem) => {
      let caught: unknown;
      try {
        new WebhookTransport('hooks', options);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(OutboxConfigurationError);
      const error = caught as OutboxConfigurationError;
      expect(error.option).toBe(`transports.hooks.${option}`);
      expect(error.message).toMatch(problem);
      expect(error.message).not.toContain('pa55');
    });

    it('accepts a transport without a default URL (routes then give one)', () => {
      expect(new WebhookTransport('hooks', {}).name).toBe('hooks');
    });
  });
});
