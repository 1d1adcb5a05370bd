import { errorFingerprint, errorSignature } from '../../lib/operations/error-fingerprint';

/**
 * What varies between two occurrences of one failure, two values of each kind, as the providers write
 * them. A corpus text names a slot as `{kind}`; everything else in it is the failure's own wording.
 */
const VALUES: Record<string, [string, string]> = {
  n: ['42', '7'],
  status: ['503', '502'],
  ms: ['5000', '30000'],
  account: ['123456789012', '210987654321'],
  ip: ['127.0.0.1', '10.0.3.17'],
  port: ['5432', '3306'],
  uuid: ['4c6f1b2e-9a7d-4e21-8b3f-0d5c6a7e8f90', 'e0b2d7c4-1f3a-4b5c-9d8e-7a6f5b4c3d2e'],
  ulid: ['01ARZ3NDEKTSV4RRFFQ69G5FAV', '01HGW2N7EHJV3C5X0Z6P9QK4RT'],
  req: ['req_8dWlE1YBWr3Nqj', 'req_Zy3kP9ua0LwQ7m'],
  pi: ['pi_3NqkzB2eZvKYlo2C1gF8Xb1d', 'pi_3OzA7cL2mXyRt4Bp0HjK9sQe'],
  ch: ['ch_3NqkzB2eZvKYlo2C1Jx0Wd5Q', 'ch_1Ab2Cd3Ef4Gh5Ij6Kl7Mn8Op'],
  cus: ['cus_NffrFeUfNV2Hib', 'cus_OaBcDeFgHiJkLm'],
  evt: ['evt_1NG8Du2eZvKYlo2CUI79vXWy', 'evt_3OqP0aLkdjf9Q2bH1mNc7XyZ'],
  ord: ['ord_1a2b3c4d5e6f7a8b', 'ord_9f8e7d6c5b4a3210'],
  s3req: ['4442587FB7D0A2F9', '0D5B3A9F1C2E7B84'],
  s3host: [
    'vlR7PnpV2Ce81l0PRw6jlUpck7Jo5ZsQjryTjKlc5aLWGVHPZLj5NeC6qMa0emYBDXOo6QBU0Wo=',
    'Hk3+9pQ/zXwV2mN8bL0cR4tY6uI1oA5sD7fG9hJ2kL4zX6cV8bN0mQ1wE3rT5yU7iO9p',
  ],
  trace: ['1-5759e988-bd862e3fe1be46a994272793', '1-67a1c0de-0f3b5d7e9a1c2e4f6a8b0d1e'],
  hex: ['deadbeef00c0ffee', '0123456789abcdef0123'],
  email: ['ana@example.com', 'bo.li+shop@mail.example.org'],
  query: ['?attempt=1&trace=ab12', '?attempt=3'],
  // Quoted values: keys, constraint and table names, whatever the message quotes.
  q: ['orders_pkey', 'PRIMARY'],
  q2: ['shop.orders', 'idx_orders_email'],
  q3: ['field list', 'where clause'],
  key: ['idem-2024-06-01-0042', "customer's retry 7"],
};

/** Provider errors in their real shapes; some as the worker records them, after the handler and the error's class. */
const CORPUS = [
  // Stripe
  "Your card's security code is incorrect. (request '{req}')",
  "Your card's expiration year is invalid. (request '{req}')",
  "The customer's card was declined; don't retry",
  "The customer's address could not be verified; don't retry",
  'Payments.charge: StripeCardError: Your card was declined. (code card_declined, decline_code insufficient_funds, charge {ch})',
  'Payments.charge: StripeCardError: Your card has insufficient funds. (payment_intent {pi})',
  "StripeInvalidRequestError: No such customer: '{cus}'",
  "StripeInvalidRequestError: This PaymentIntent's amount could not be updated because it has a status of succeeded. (payment_intent {pi}, request {req})",
  'StripeRateLimitError: Too many requests made to the API too quickly (request {req})',
  "StripeIdempotencyError: Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{key}' if you meant to execute a different request.",
  'StripeSignatureVerificationError: No signatures found matching the expected signature for payload (event {evt})',
  // AWS SDK
  'ThrottlingException: Rate exceeded (RequestId: {uuid})',
  'AccessDenied: Access Denied (Service: Amazon S3; Status Code: 403; Error Code: AccessDenied; Request ID: {s3req}; S3 Extended Request ID: {s3host}; Proxy: null)',
  'AccessDeniedException: User: arn:aws:iam::{account}:user/orders-service is not authorized to perform: sqs:SendMessage on resource: arn:aws:sqs:eu-west-1:{account}:order-events because no identity-based policy allows the sqs:SendMessage action',
  'ProvisionedThroughputExceededException: The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API. (RequestId: {uuid})',
  'ExpiredTokenException: The security token included in the request is expired (RequestId: {uuid})',
  'RequestId: {uuid} Error: Task timed out after {n}.00 seconds (trace {trace})',
  // node-postgres
  'duplicate key value violates unique constraint "{q}"',
  'relation "{q2}" does not exist',
  'column "{q}" does not exist',
  'insert or update on table "{q2}" violates foreign key constraint "{q}"',
  'null value in column "{q}" of relation "{q2}" violates not-null constraint',
  'could not serialize access due to concurrent update',
  'deadlock detected',
  'canceling statement due to statement timeout',
  'invalid input syntax for type uuid: "{q}"',
  'value too long for type character varying({n})',
  'remaining connection slots are reserved for non-replication superuser connections',
  'Connection terminated unexpectedly',
  // mysql2
  "ER_DUP_ENTRY: Duplicate entry '{n}' for key '{q}'",
  'ER_LOCK_DEADLOCK: Deadlock found when trying to get lock; try restarting transaction',
  'ER_LOCK_WAIT_TIMEOUT: Lock wait timeout exceeded; try restarting transaction',
  "ER_NO_SUCH_TABLE: Table '{q2}' doesn't exist",
  "ER_BAD_FIELD_ERROR: Unknown column '{q}' in '{q3}'",
  "ER_DATA_TOO_LONG: Data too long for column '{q}' at row {n}",
  'ER_NO_REFERENCED_ROW_2: Cannot add or update a child row: a foreign key constraint fails (`{q2}`, CONSTRAINT `{q}` FOREIGN KEY (`{q3}`) REFERENCES `{q}` (`{q3}`))',
  'ER_CON_COUNT_ERROR: Too many connections',
  // axios
  'AxiosError: Request failed with status code {status}',
  'AxiosError: timeout of {ms}ms exceeded',
  'AxiosError: Network Error',
  'AxiosError: Request failed with status code {status} (POST https://api.example.com/v1/orders/{ord}/capture{query})',
  // Node's network errors
  'connect ECONNREFUSED {ip}:{port}',
  'connect ETIMEDOUT {ip}:{port}',
  'connect EHOSTUNREACH {ip}:{port}',
  'getaddrinfo ENOTFOUND api.example.com',
  'getaddrinfo EAI_AGAIN api.example.com',
  'read ECONNRESET',
  'write EPIPE',
  'socket hang up',
  'Client network socket disconnected before secure TLS connection was established',
  'unable to verify the first certificate',
  // The application's own, one quoting an upstream's sentence
  'Upstream rejected order {ord}: "Your card has expired."',
  'Upstream rejected order {ord}: "Your card was declined."',
  'OrderNotFoundError: order {ord} not found',
  'Shipment {ulid} was already dispatched to {email}',
  'Webhook delivery to https://hooks.example.com/orders{query} failed: secret {hex} rejected',
];

const fill = (text: string, which: 0 | 1) =>
  text.replace(/\{(\w+)\}/g, (_, kind: string) => {
    if (!VALUES[kind]) throw new Error(`no values for {${kind}}`);
    return VALUES[kind][which];
  });

/** The failure's own words of three letters or more: the text outside its slots and outside what it quotes. */
function ownWords(text: string): string[] {
  const outside = text.replace(/(["'`])\{\w+\}\1|\{\w+\}/g, ' ');
  return outside.match(/\p{L}{3,}/gu) ?? [];
}

describe('errorSignature', () => {
  it.each(CORPUS.filter((text) => /\{\w+\}/.test(text)))(
    'reads two occurrences of one failure the same: %s',
    (text) => {
      const [a, b] = [fill(text, 0), fill(text, 1)];
      expect(a).not.toBe(b);
      expect(errorSignature(a)).toBe(errorSignature(b));
    },
  );

  it.each(CORPUS)("keeps every word of the failure's own: %s", (text) => {
    const signature = errorSignature(fill(text, 0));
    const words = new Set(signature.match(/\p{L}+/gu));
    for (const word of ownWords(text)) expect({ word, kept: words.has(word) }).toEqual({ word, kept: true });
  });

  it('tells every two failures of the corpus apart', () => {
    const failures = new Map<string, Set<string>>();
    for (const text of CORPUS) {
      for (const which of [0, 1] as const) {
        const signature = errorSignature(fill(text, which));
        failures.set(signature, (failures.get(signature) ?? new Set()).add(text));
      }
    }
    const shared = [...failures]
      .filter(([, texts]) => texts.size > 1)
      .map(([signature, texts]) => ({ signature, texts: [...texts] }));
    expect(shared).toEqual([]);
  });

  it('takes an apostrophe inside a word for one, and masks only what is quoted', () => {
    expect(errorSignature("Your card's security code is incorrect. (request 'req_4711')")).toBe(
      "Your card's security code is incorrect. (request '…')",
    );
    expect(errorSignature("The customer's card was declined; don't retry")).toBe(
      "The customer's card was declined; don't retry",
    );
    expect(errorSignature("Table 'shop.orders' doesn't exist")).toBe("Table '…' doesn't exist");
    expect(errorSignature("Try a key other than 'customer's retry 7' next time")).toBe(
      "Try a key other than '…' next time",
    );
    // Quote marks a sentence apart are no pair, and a quoted sentence is wording.
    expect(errorSignature("Value 'A is late. Retry' failed")).toBe("Value 'A is late. Retry' failed");
    expect(errorSignature("Upstream said 'Your card has expired.' for 'ord_42'")).toBe(
      "Upstream said 'Your card has expired.' for '…'",
    );
    expect(errorSignature('{"message":"Too many requests"}')).toBe('{"message":"…"}');
    expect(errorSignature('parse failed at "x. Expected" a comma')).toBe('parse failed at "x. Expected" a comma');
  });

  it('masks an id as one placeholder, whatever its form', () => {
    const ids = [
      'req_4711',
      'ord_1a2b3c4d5e6f7a8b',
      'pi_3NqkzB2eZvKYlo2C1gF8Xb1d',
      'cus_OaBcDeFgHiJkLm',
      'sk_test_4eC39HqLyjWDarjtT1zdp7dc',
      '01ARZ3NDEKTSV4RRFFQ69G5FAV',
      '0190c5a1-7b2e-7c3d-9e4f-a1b2c3d4e5f6',
      '4442587FB7D0A2F9',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
    ];
    const signatures = ids.map((id) => [id, errorSignature(`lookup of ${id} failed`)]);
    expect(signatures).toEqual(ids.map((id) => [id, 'lookup of <id> failed']));
  });

  it('leaves words that merely look like ids: snake case, error codes, camel case, paths', () => {
    const cases: Array<[string, string]> = [
      ['decline_code insufficient_funds', 'decline_code insufficient_funds'],
      ['ER_LOCK_DEADLOCK', 'ER_LOCK_DEADLOCK'],
      ['ProvisionedThroughputExceededException', 'ProvisionedThroughputExceededException'],
      ['arn:aws:iam::123456789012:role/OrdersServiceRole', 'arn:aws:iam::<n>:role/OrdersServiceRole'],
      ['collation utf8mb4_unicode_ci', 'collation utf<n>mb<n>_unicode_ci'],
      ['at /Users/ana/Projects/shop2/src/index.ts', 'at /Users/ana/Projects/shop<n>/src/index.ts'],
    ];
    for (const [text, signature] of cases) expect(errorSignature(text)).toBe(signature);
  });

  it('masks numbers, e-mail addresses and query strings, and collapses white space', () => {
    expect(errorSignature('connect ECONNREFUSED 127.0.0.1:5432')).toBe('connect ECONNREFUSED <n>:<n>');
    expect(errorSignature('mail to ana@example.com bounced:\n  550 5.1.1')).toBe('mail to <email> bounced: <n> <n>');
    expect(errorSignature('GET /orders?page=2&sort=desc failed')).toBe('GET /orders?… failed');
    expect(errorSignature('Why? Because')).toBe('Why? Because');
  });

  describe('errors serialised as JSON', () => {
    const rejection = (code: string, port: number, url: string) =>
      `transport:rabbit: non-Error rejection: {"err":{"errno":-111,"code":"${code}","syscall":"connect",` +
      `"address":"127.0.0.1","port":${port}},"url":"${url}"}`;

    it('keeps the keys and the codes, and masks the other values', () => {
      expect(errorSignature(rejection('ECONNREFUSED', 5999, 'amqp://127.0.0.1:5999'))).toBe(
        'transport:rabbit: non-Error rejection: {"err":{"errno":-111,"code":"ECONNREFUSED","syscall":"…",' +
          '"address":"…","port":<n>},"url":"…"}',
      );
    });

    it('reads two occurrences of one failure the same, and tells codes and shapes apart', () => {
      const refused = errorSignature(rejection('ECONNREFUSED', 5999, 'amqp://127.0.0.1:5999'));
      expect(errorSignature(rejection('ECONNREFUSED', 5672, 'amqp://10.0.0.7:5672'))).toBe(refused);
      expect(errorSignature(rejection('ENOTFOUND', 5999, 'amqp://127.0.0.1:5999'))).not.toBe(refused);
      expect(
        errorSignature('transport:rabbit: non-Error rejection: {"reply":{"replyCode":403},"url":"amqp://x"}'),
      ).not.toBe(refused);
      expect(errorSignature('{"name":"TimeoutError","detail":"after 30 s"}')).toBe(
        '{"name":"TimeoutError","detail":"…"}',
      );
    });
  });
});

describe('errorSignature of errors with a code', () => {
  /** Two errors alike but for their code, which makes them two failures. */
  const twoCodes: Array<[string, string]> = [
    ['HttpError: {"status":404,"message":"Not Found"}', 'HttpError: {"status":500,"message":"Not Found"}'],
    ['{"statusCode":404,"error":"Not Found"}', '{"statusCode":500,"error":"Not Found"}'],
    [
      'PrismaClientKnownRequestError: {"code":"P2002","meta":{"modelName":"Order","target":["email"]}}',
      'PrismaClientKnownRequestError: {"code":"P2025","meta":{"modelName":"Order","target":["email"]}}',
    ],
    [
      '{"code":"23505","detail":"Key (id)=(41) already exists.","table":"orders"}',
      '{"code":"23503","detail":"Key (id)=(41) already exists.","table":"orders"}',
    ],
    ['{"sqlState": "23505"}', '{"sqlState": "23503"}'],
    ['{"errno":1062,"code":"ER_DUP_ENTRY"}', '{"errno":1452,"code":"ER_DUP_ENTRY"}'],
    ['non-Error rejection: duplicate key value (code 23505)', 'non-Error rejection: duplicate key value (code 23503)'],
    ['Sink.text: non-Error rejection: code P2002', 'Sink.text: non-Error rejection: code P2025'],
    ['SQLSTATE[23505]: Integrity constraint violation', 'SQLSTATE[23503]: Integrity constraint violation'],
  ];

  it.each(twoCodes)('tells %s from %s', (a, b) => {
    expect(errorSignature(a)).not.toBe(errorSignature(b));
  });

  it('keeps the code as written and masks what varies beside it: ids, numbers in prose, timestamps, UUIDs', () => {
    const failure = (id: number, at: string, uuid: string) =>
      `OrderSync: QueryError: {"code":"23505","status":409,"detail":"Key (id)=(${id}) already exists.",` +
      `"at":"${at}","requestId":"${uuid}"} after ${id % 7} attempts at ${at} (request ${uuid})`;
    const signature = errorSignature(failure(41, '2026-12-04T13:53:24.120Z', VALUES.uuid[0]));
    expect(errorSignature(failure(90210, '2027-01-31T00:00:01Z', VALUES.uuid[1]))).toBe(signature);
    expect(signature).toBe(
      // The detail is a quoted sentence: wording, its number masked.
      'OrderSync: QueryError: {"code":"23505","status":409,"detail":"Key (id)=(<n>) already exists.","at":"…",' +
        '"requestId":"…"} after <n> attempts at <n>-<n>-<n>T<n>:<n>:<n>Z (request <id>)',
    );
    expect(errorSignature('non-Error rejection: order 41 exists (code 23505)')).toBe(
      'non-Error rejection: order <n> exists (code 23505)',
    );
  });

  it("keeps as codes only short tokens under a code's name, and only the value, not the numbers around it", () => {
    // A sentence or an id under "code" is no code; a "port" or an "id" is no code field.
    expect(errorSignature('{"code":"timed out after 30 s","port":5432,"id":77}')).toBe(
      '{"code":"timed out after <n> s","port":<n>,"id":<n>}',
    );
    expect(errorSignature(`{"code":"${VALUES.uuid[0]}"}`)).toBe(errorSignature(`{"code":"${VALUES.uuid[1]}"}`));
    expect(errorSignature('{"status":"2026-12-04T13:53:24Z","code":1733320404}')).toBe(
      errorSignature('{"status":"2027-01-31T00:00:01Z","code":1738281601}'),
    );
    // What looks like the marks the codes are set apart with is no code.
    expect(errorSignature('\ue000 {"code":404} \ue001')).toBe('\ufffd {"code":404} \ufffd');
  });
});

describe('errorFingerprint', () => {
  it('separates topics and signatures, and is 16 hex digits', () => {
    const a = errorFingerprint('order.placed', 'boom');
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(errorFingerprint('order.placed', 'boom')).toBe(a);
    expect(errorFingerprint('order.paid', 'boom')).not.toBe(a);
    expect(errorFingerprint('order.placed', 'bang')).not.toBe(a);
  });
});
