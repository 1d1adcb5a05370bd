import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { LEASE_EXPIRED } from '../../lib/dialects/shared/claim-rules';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { backends, type BackendName } from '../fixtures/backends';
import { createTestApp, type TestApp } from '../fixtures/test-app';

/**
 * A model-based property test of the claim protocol: random sequences of claims, acknowledgements,
 * failures, releases, lease expiries and publishes by a few simulated workers run against the real
 * store, and after every step the whole table is compared with a model of what each event should be.
 */

/** Small, so that the bound is reached (and the dead-lettering claim runs) in most sequences. */
const MAX_ATTEMPTS = 3;
const WORKERS = 3;
/** Leases never run out by themselves during a run; only the expiry command ends one (see Expire). */
const LEASE_MS = 10 * 60_000;
const MAX_BATCH = 4;
const RUNS = 250;
const MAX_COMMANDS = 50;

/*
 * better-sqlite3, PostgreSQL and MariaDB: each has its own claim SQL. sqlite3 runs the very same SQLite
 * SQL as better-sqlite3 (its driver quirk, RETURNING rows dropped, has its own e2e test), so a second
 * SQLite run would add time and no new state transitions.
 */
const BACKENDS = backends().filter((b) => b !== 'sqlite3');

type Status = 'pending' | 'delivered' | 'dead';

interface ModelEvent {
  id: string;
  status: Status;
  attempts: number;
  /** The claim token on the row; null when nobody has claimed it since it was last given back. */
  token: string | null;
  /** Whether the lease of `token` is still running (meaningless without a token). */
  leaseLive: boolean;
  /** What `last_error` must hold: the last recorded failure, which no claim or release overwrites. */
  lastError: string | null;
  /** What `note` must hold; undefined where the protocol does not say (it must then be set). */
  note: string | null | undefined;
}

/** One claim a simulated worker made: it keeps the token and ids for ever, so it also acts on stale ones. */
interface Held {
  token: string;
  ids: string[];
}

interface Model {
  /** In publish order. */
  events: Map<string, ModelEvent>;
  /** Per worker, its claims, oldest first. */
  held: Held[][];
}

const inFlight = (e: ModelEvent) => e.status === 'pending' && e.token !== null && e.leaseLive;
const claimable = (e: ModelEvent) => e.status === 'pending' && !inFlight(e);
/** Whether a write fenced by `token` applies: the claim still holds the event, its lease live or not (no other claim came). */
const heldBy = (e: ModelEvent, token: string) => e.status === 'pending' && e.token === token;
/** Counts a write that applied although its lease had run out: only another claim voids a holder's outcome. */
const countLate = (e: ModelEvent, what: string) => {
  if (!e.leaseLive) count(`${what} applied after its lease expired`);
};

/** A row as read back with the backend's own clock; times as fixed-width UTC text, so they compare exactly. */
interface Row {
  id: string;
  status: string;
  attempts: number;
  claim_token: string | null;
  last_error: string | null;
  note: string | null;
  completed_handlers: string;
  available_at: string;
  processed_at: string | null;
  created_at: string;
  /** `available_at` is after the database's now: for a claimed row, its lease is live. */
  future: boolean;
}

/** The backend-specific SQL this test needs: its clock, and times rendered as sortable text. */
interface ClockSql {
  now: string;
  time: (column: string) => string;
  json: (column: string) => string;
  oneMsAgo: string;
}

function clockSql(backend: BackendName): ClockSql {
  switch (backend) {
    case 'postgres':
      return {
        now: 'now()',
        time: (c) => `to_char("${c}" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')`,
        json: (c) => `"${c}"::text`,
        oneMsAgo: `now() - interval '1 millisecond'`,
      };
    case 'mariadb':
      return {
        now: 'UTC_TIMESTAMP(6)',
        time: (c) => `DATE_FORMAT("${c}", '%Y-%m-%dT%H:%i:%s.%f')`,
        json: (c) => `"${c}"`,
        oneMsAgo: 'UTC_TIMESTAMP(6) - INTERVAL 1000 MICROSECOND',
      };
    default:
      return {
        now: `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`,
        time: (c) => `"${c}"`,
        json: (c) => `"${c}"`,
        oneMsAgo: `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-0.001 seconds')`,
      };
  }
}

interface Real {
  app: TestApp;
  store: OutboxStore;
  clock: ClockSql;
  /** The table as read after the previous command. */
  rows: Map<string, Row>;
  /** Delivered and dead rows as first seen: they must never change again. */
  finals: Map<string, Row>;
}

/** How often each situation came up over all runs, to prove the sequences reach what they should. */
const tally = new Map<string, number>();
const count = (what: string, n = 1) => tally.set(what, (tally.get(what) ?? 0) + n);

function check(condition: boolean, message: () => string): asserts condition {
  if (!condition) throw new Error(message());
}

function same(actual: unknown, expected: unknown, what: string): void {
  check(JSON.stringify(actual) === JSON.stringify(expected), () => {
    return `${what}\n  expected ${JSON.stringify(expected)}\n  actual   ${JSON.stringify(actual)}`;
  });
}

const short = (id: string | null) => (id === null ? 'null' : id.slice(-8));
const sorted = (ids: Iterable<string>) => [...ids].sort();
const byDueOrder = (rows: Map<string, Row>) => (a: string, b: string) => {
  const ra = rows.get(a)!;
  const rb = rows.get(b)!;
  return ra.available_at < rb.available_at ? -1 : ra.available_at > rb.available_at ? 1 : a < b ? -1 : a > b ? 1 : 0;
};

async function readRows(r: Real): Promise<Map<string, Row>> {
  const { time, json, now } = r.clock;
  const raw = await r.app.raw.query(
    `SELECT "id", "status", "attempts", "claim_token", "last_error", "note", ${json('completed_handlers')} AS "completed_handlers",
            ${time('available_at')} AS "available_at", ${time('processed_at')} AS "processed_at",
            ${time('created_at')} AS "created_at", ("available_at" > ${now}) AS "future"
     FROM "${r.app.table}"`,
  );
  return new Map(
    raw.map((row) => {
      const decoded: Row = {
        id: String(row.id),
        status: String(row.status),
        attempts: Number(row.attempts),
        claim_token: (row.claim_token as string | null) ?? null,
        last_error: (row.last_error as string | null) ?? null,
        note: (row.note as string | null) ?? null,
        completed_handlers: String(row.completed_handlers),
        available_at: String(row.available_at),
        processed_at: (row.processed_at as string | null) ?? null,
        created_at: String(row.created_at),
        future: row.future === true || Number(row.future) === 1,
      };
      return [decoded.id, decoded];
    }),
  );
}

/**
 * Reads the table and checks it against the model after `command`: rows the command should not have
 * touched are byte for byte as before, every row has the model's state, final rows never change, and
 * the store's own counts agree. Returns the rows read.
 */
async function verify(m: Model, r: Real, touched: Set<string>, command: string): Promise<Map<string, Row>> {
  count('commands checked');
  const rows = await readRows(r);
  same(sorted(rows.keys()), sorted(m.events.keys()), `after ${command}: the table holds other events than published`);

  for (const [id, row] of rows) {
    const e = m.events.get(id)!;
    const where = `after ${command}: event …${short(id)}`;
    const before = r.rows.get(id);
    if (!touched.has(id)) {
      check(before !== undefined, () => `${where} appeared although nothing published it`);
      same(row, before, `${where} changed although the command must leave it alone`);
    }

    check(
      row.attempts >= 0 && row.attempts <= MAX_ATTEMPTS,
      () => `${where} has ${row.attempts} attempts (max ${MAX_ATTEMPTS})`,
    );
    same(
      { status: row.status, attempts: row.attempts, claim_token: row.claim_token },
      { status: e.status, attempts: e.attempts, claim_token: e.status === 'pending' ? e.token : null },
      `${where} differs from the model`,
    );
    same(row.last_error, e.lastError, `${where}: last_error`);
    if (e.note !== undefined) same(row.note, e.note, `${where}: note`);
    else check(row.note !== null, () => `${where}: note is empty`);
    if (e.status === 'pending') {
      // In flight exactly when it holds a token whose lease runs; every other pending row is due now.
      const problem = inFlight(e) ? 'a live lease is not in the future' : 'a claimable row is not due';
      same(row.future, inFlight(e), `${where}: ${problem}`);
      same(row.processed_at, null, `${where}: a pending row has processed_at`);
    } else {
      check(row.processed_at !== null, () => `${where}: ${row.status} without processed_at`);
      const first = r.finals.get(id);
      if (first) same(row, first, `${where}: a ${first.status} row changed`);
      else r.finals.set(id, row);
    }
  }

  const events = [...m.events.values()];
  same(
    await r.store.counts(),
    {
      pending: events.filter(claimable).length,
      // The model's failures retry at once (no backoff): every claimable row is due, none scheduled.
      due: events.filter(claimable).length,
      scheduled: 0,
      inFlight: events.filter(inFlight).length,
      delivered: events.filter((e) => e.status === 'delivered').length,
      dead: events.filter((e) => e.status === 'dead').length,
    },
    `after ${command}: store.counts()`,
  );
  r.rows = rows;
  return rows;
}

type Cmd = fc.AsyncCommand<Model, Real>;

/** Which of a worker's claims a command acts on: mostly the newest, sometimes an older (stale) one. */
function pickHeld(m: Model, worker: number, pick: number): Held {
  const held = m.held[worker];
  return held[held.length - 1 - (pick % held.length)];
}

/** Why a call with `token` cannot change `e` (the model already says it cannot). */
function staleReason(e: ModelEvent, token: string, forged: boolean): string {
  if (forged) return 'a token no claim issued';
  if (e.status !== 'pending') return `the event is ${e.status}`;
  if (e.token === null) return 'the event was given back';
  if (e.token !== token) return 'another claim holds the event';
  return 'the claim still holds the event';
}

class Publish implements Cmd {
  constructor(readonly n: number) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const results = await r.app.txHost.withTransaction(() =>
      r.app.outbox.publishMany(Array.from({ length: this.n }, (_, i) => ({ topic: 'sm.event', payload: { i } }))),
    );
    for (const { id } of results) {
      m.events.set(id, {
        id,
        status: 'pending',
        attempts: 0,
        token: null,
        leaseLive: false,
        lastError: null,
        note: null,
      });
    }
    await verify(m, r, new Set(results.map((p) => p.id)), this.toString());
  }
  toString = () => `publish(${this.n})`;
}

/** What a claim notes when it finds that attempt `n`'s lease ran out. */
const expiredAttempt = (n: number) => `attempt ${n} of ${MAX_ATTEMPTS} ${LEASE_EXPIRED}`;

/** Checks what one claim returned against the model, and applies it there. */
function applyClaim(m: Model, worker: number, result: Awaited<ReturnType<OutboxStore['claim']>>, what: string) {
  for (const event of [...result.events, ...result.deadLettered]) {
    const e = m.events.get(event.id);
    check(e !== undefined, () => `${what} returned an unknown event …${short(event.id)}`);
    check(!inFlight(e), () => `${what} took …${short(event.id)}, whose lease under token …${short(e.token)} is live`);
    check(e.status === 'pending', () => `${what} took …${short(event.id)}, which is ${e.status}`);
  }
  for (const event of result.events) {
    const e = m.events.get(event.id)!;
    same(
      // A claim returns only what the worker reads; the table check after each command compares claim_token.
      { status: event.status, attempts: event.attempts },
      { status: 'pending', attempts: e.attempts + 1 },
      `${what}: claimed event …${short(event.id)}`,
    );
    if (e.token !== null) {
      count('claim took over an expired lease');
      e.note = expiredAttempt(e.attempts);
    }
    Object.assign(e, { attempts: e.attempts + 1, token: result.token, leaseLive: true });
  }
  for (const event of result.deadLettered) {
    const e = m.events.get(event.id)!;
    same(
      { status: event.status, attempts: event.attempts },
      { status: 'dead', attempts: e.attempts },
      `${what}: dead-lettered event …${short(event.id)}`,
    );
    count(
      e.token !== null
        ? 'claim dead-lettered an expired last attempt'
        : 'claim dead-lettered a given-back last attempt',
    );
    // A last attempt given back (released with its count kept, or failed for a retry) is dead at the
    // next claim, keeping its recorded error; with none, the protocol says only that the note must
    // then explain why, not in which words.
    if (e.token !== null) e.note = expiredAttempt(e.attempts);
    else if (e.lastError === null) e.note = undefined;
    Object.assign(e, { status: 'dead', token: null });
  }
  if (result.events.length > 0) m.held[worker].push({ token: result.token, ids: result.events.map((e) => e.id) });
}

function expectedPicks(m: Model, due: string[], total: number) {
  const picked = due.slice(0, total);
  const spent = (id: string) => m.events.get(id)!.attempts >= MAX_ATTEMPTS;
  return { picked, taken: sorted(picked.filter((id) => !spent(id))), dead: sorted(picked.filter(spent)) };
}

class Claim implements Cmd {
  constructor(
    readonly worker: number,
    readonly batchSize: number,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const due = [...m.events.values()]
      .filter(claimable)
      .map((e) => e.id)
      .sort(byDueOrder(r.rows));
    const expected = expectedPicks(m, due, this.batchSize);
    const result = await r.store.claim({ batchSize: this.batchSize, leaseMs: LEASE_MS, maxAttempts: MAX_ATTEMPTS });
    same(
      { taken: sorted(result.events.map((e) => e.id)), dead: sorted(result.deadLettered.map((e) => e.id)) },
      { taken: expected.taken, dead: expected.dead },
      `${this.toString()}: not the oldest due rows (due, oldest first: ${due.map(short).join(' ')})`,
    );
    applyClaim(m, this.worker, result, this.toString());
    await verify(m, r, new Set(expected.picked), this.toString());
  }
  toString = () => `claim(w${this.worker}, batch ${this.batchSize})`;
}

/**
 * Two workers claim at the same moment. Each claim is one statement (PostgreSQL), one short
 * transaction with SKIP LOCKED (MariaDB), or passes the connection gate (SQLite): together they take
 * the oldest due rows, and never the same one.
 */
class ClaimTogether implements Cmd {
  constructor(
    readonly a: { worker: number; batchSize: number },
    readonly b: { worker: number; batchSize: number },
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const due = [...m.events.values()]
      .filter(claimable)
      .map((e) => e.id)
      .sort(byDueOrder(r.rows));
    const expected = expectedPicks(m, due, this.a.batchSize + this.b.batchSize);
    const claim = (batchSize: number) => r.store.claim({ batchSize, leaseMs: LEASE_MS, maxAttempts: MAX_ATTEMPTS });
    const [ra, rb] = await Promise.all([claim(this.a.batchSize), claim(this.b.batchSize)]);
    const idsOf = (c: typeof ra) => [...c.events, ...c.deadLettered].map((e) => e.id);
    const both = new Set(idsOf(ra).filter((id) => idsOf(rb).includes(id)));
    check(both.size === 0, () => `${this.toString()}: both claims took ${[...both].map(short).join(' ')}`);
    const withinBatch = idsOf(ra).length <= this.a.batchSize && idsOf(rb).length <= this.b.batchSize;
    check(withinBatch, () => `${this.toString()}: a claim exceeded its batch`);
    same(
      {
        taken: sorted([...ra.events, ...rb.events].map((e) => e.id)),
        dead: sorted([...ra.deadLettered, ...rb.deadLettered].map((e) => e.id)),
      },
      { taken: expected.taken, dead: expected.dead },
      `${this.toString()}: together not the oldest due rows (due, oldest first: ${due.map(short).join(' ')})`,
    );
    if (idsOf(ra).length > 0 && idsOf(rb).length > 0) count('concurrent claims both took rows');
    applyClaim(m, this.a.worker, ra, this.toString());
    applyClaim(m, this.b.worker, rb, this.toString());
    await verify(m, r, new Set(expected.picked), this.toString());
  }
  toString = () =>
    `claimTogether(w${this.a.worker} batch ${this.a.batchSize}, w${this.b.worker} batch ${this.b.batchSize})`;
}

interface Target {
  worker: number;
  /** Which held claim, counted from the newest. */
  claim: number;
  /** A token no claim ever issued, instead of the held one. */
  forged: boolean;
}

/** The ids of `held` that `mask` selects, and perhaps one event of the whole table (any state, any owner). */
function selectIds(m: Model, held: Held, mask: number, extra: number | null): string[] {
  const ids = held.ids.filter((_, i) => (mask >> i) & 1);
  if (extra !== null) ids.push([...m.events.keys()][extra % m.events.size]);
  return ids;
}

const forgedNote = (t: Target) => (t.forged ? ', forged token' : '');
const listed = (t: Target, mask: number, extra: number | null) =>
  `w${t.worker}, claim -${t.claim}, mask ${mask}${extra === null ? '' : `, +event #${extra}`}${forgedNote(t)}`;
const one = (t: Target, pick: number) => `w${t.worker}, claim -${t.claim}, id ${pick}${forgedNote(t)}`;

class Acknowledge implements Cmd {
  constructor(
    readonly t: Target,
    /** Bit i set: the i-th id of the held claim is in the call. */
    readonly mask: number,
    readonly extra: number | null,
  ) {}
  check = (m: Readonly<Model>) => m.held[this.t.worker].length > 0;
  async run(m: Model, r: Real) {
    const held = pickHeld(m, this.t.worker, this.t.claim);
    const ids = selectIds(m, held, this.mask, this.extra);
    const token = this.t.forged ? randomUUID() : held.token;
    const expected = [...new Set(ids)].filter((id) => heldBy(m.events.get(id)!, token));
    const reasons = new Map(ids.map((id) => [id, staleReason(m.events.get(id)!, token, this.t.forged)]));

    const acknowledged = await r.store.acknowledge(ids, token);
    same(acknowledged, expected.length, `${this.toString()}: acknowledged count for ids ${ids.map(short).join(' ')}`);

    for (const id of expected) countLate(m.events.get(id)!, 'acknowledge');
    for (const id of expected) Object.assign(m.events.get(id)!, { status: 'delivered', token: null });
    for (const [id, reason] of reasons)
      count(expected.includes(id) ? 'acknowledge applied' : `stale acknowledge: ${reason}`);
    await verify(m, r, new Set(expected), this.toString());
  }
  toString = () => `acknowledge(${listed(this.t, this.mask, this.extra)})`;
}

let failures = 0;

class Fail implements Cmd {
  constructor(
    readonly t: Target,
    readonly pick: number,
    readonly deadLetter: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.held[this.t.worker].length > 0;
  async run(m: Model, r: Real) {
    const held = pickHeld(m, this.t.worker, this.t.claim);
    const id = held.ids[this.pick % held.ids.length];
    const token = this.t.forged ? randomUUID() : held.token;
    const e = m.events.get(id)!;
    const applies = heldBy(e, token);
    const reason = staleReason(e, token, this.t.forged);
    const error = `failure ${++failures}`;

    const update = { error, completedHandlers: ['sm.first'], deadLetter: this.deadLetter, retryDelayMs: 0 };
    const ok = await r.store.fail(id, token, update);
    same(ok, applies, `${this.toString()}: fail(…${short(id)}, token …${short(token)}) result`);

    count(applies ? `fail applied (${this.deadLetter ? 'dead letter' : 'retry'})` : `stale fail: ${reason}`);
    if (applies) countLate(e, 'fail');
    if (applies) Object.assign(e, { status: this.deadLetter ? 'dead' : 'pending', token: null, lastError: error });
    const rows = await verify(m, r, new Set(applies ? [id] : []), this.toString());
    if (applies)
      same(
        JSON.parse(rows.get(id)!.completed_handlers),
        ['sm.first'],
        `${this.toString()}: completed handlers of …${short(id)}`,
      );
  }
  toString = () => `fail(${one(this.t, this.pick)}, ${this.deadLetter ? 'dead letter' : 'retry now'})`;
}

class Release implements Cmd {
  constructor(
    readonly t: Target,
    readonly pick: number,
    readonly uncount: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.held[this.t.worker].length > 0;
  async run(m: Model, r: Real) {
    const held = pickHeld(m, this.t.worker, this.t.claim);
    const id = held.ids[this.pick % held.ids.length];
    const token = this.t.forged ? randomUUID() : held.token;
    const e = m.events.get(id)!;
    const applies = heldBy(e, token);
    const reason = staleReason(e, token, this.t.forged);

    const ok = await r.store.release(id, token, this.uncount);
    same(ok, applies, `${this.toString()}: release(…${short(id)}, token …${short(token)}) result`);

    count(applies ? `release applied (${this.uncount ? 'uncounted' : 'counted'})` : `stale release: ${reason}`);
    if (applies) countLate(e, 'release');
    if (applies) Object.assign(e, { token: null, attempts: e.attempts - (this.uncount ? 1 : 0) });
    await verify(m, r, new Set(applies ? [id] : []), this.toString());
  }
  toString = () => `release(${one(this.t, this.pick)}, ${this.uncount ? 'uncount' : 'keep attempt'})`;
}

/** The worker's batch release: the events of a claim it will not run, given back in one statement. */
class ReleaseMany implements Cmd {
  constructor(
    readonly t: Target,
    readonly mask: number,
    readonly extra: number | null,
    readonly uncount: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.held[this.t.worker].length > 0;
  async run(m: Model, r: Real) {
    const held = pickHeld(m, this.t.worker, this.t.claim);
    const ids = selectIds(m, held, this.mask, this.extra);
    const token = this.t.forged ? randomUUID() : held.token;
    const expected = [...new Set(ids)].filter((id) => heldBy(m.events.get(id)!, token));
    const reasons = new Map(ids.map((id) => [id, staleReason(m.events.get(id)!, token, this.t.forged)]));

    const released = await r.store.releaseMany(ids, token, this.uncount);
    same(released, expected.length, `${this.toString()}: released count for ids ${ids.map(short).join(' ')}`);

    for (const id of expected) {
      const e = m.events.get(id)!;
      countLate(e, 'releaseMany');
      Object.assign(e, { token: null, attempts: e.attempts - (this.uncount ? 1 : 0) });
    }
    for (const [id, reason] of reasons)
      count(expected.includes(id) ? 'releaseMany applied' : `stale releaseMany: ${reason}`);
    await verify(m, r, new Set(expected), this.toString());
  }
  toString = () =>
    `releaseMany(${listed(this.t, this.mask, this.extra)}, ${this.uncount ? 'uncount' : 'keep attempts'})`;
}

/**
 * The passage of time, for one lease: its row's `available_at` (the lease end) is set to one
 * millisecond before the database's now, which is all that time passing changes. Waiting out short
 * real leases instead would make every run slow, and would let leases expire at moments the model
 * cannot know on a loaded machine (between a claim and its acknowledgement), so the model could not
 * say which calls must succeed. Here a lease is live until this command ends it, exactly.
 */
class Expire implements Cmd {
  constructor(readonly pick: number) {}
  check = (m: Readonly<Model>) => [...m.events.values()].some(inFlight);
  async run(m: Model, r: Real) {
    const leased = [...m.events.values()].filter(inFlight);
    const e = leased[this.pick % leased.length];
    const before = r.rows.get(e.id)!;
    await r.app.raw.query(`UPDATE "${r.app.table}" SET "available_at" = ${r.clock.oneMsAgo} WHERE "id" = ?`, [e.id]);
    e.leaseLive = false;
    count('lease expired');
    const after = (await verify(m, r, new Set([e.id]), this.toString())).get(e.id)!;
    same(
      { ...after, available_at: before.available_at, future: true },
      before,
      `${this.toString()}: more than the lease end changed`,
    );
  }
  toString = () => `expire(in-flight #${this.pick})`;
}

const worker = fc.nat({ max: WORKERS - 1 });
const batch = fc.integer({ min: 1, max: MAX_BATCH });
/** A forged token in about one call in eight: often enough to be seen, rare enough not to crowd out real calls. */
const targets = fc.record({
  worker,
  claim: fc.oneof({ arbitrary: fc.constant(0), weight: 3 }, { arbitrary: fc.nat({ max: 3 }), weight: 1 }),
  forged: fc.oneof({ arbitrary: fc.constant(false), weight: 7 }, { arbitrary: fc.constant(true), weight: 1 }),
});

/**
 * fast-check picks among these evenly, so a command listed twice comes twice as often: claims and
 * expiries, which create the states (taken, expired, reclaimed) the other commands must respect, and
 * the worker's usual acknowledgement (some ids of its own claim, nothing else).
 */
const commandArbitraries: Array<fc.Arbitrary<Cmd>> = [
  fc.integer({ min: 1, max: 3 }).map((n) => new Publish(n)),
  fc.tuple(worker, batch).map(([w, n]) => new Claim(w, n)),
  fc.tuple(worker, batch).map(([w, n]) => new Claim(w, n)),
  fc
    .tuple(fc.record({ worker, batchSize: batch }), fc.record({ worker, batchSize: batch }))
    .map(([a, b]) => new ClaimTogether(a, b)),
  fc
    .tuple(targets, fc.integer({ min: 0, max: (1 << MAX_BATCH) - 1 }), fc.option(fc.nat(), { freq: 3 }))
    .map(([t, mask, extra]) => new Acknowledge(t, mask, extra)),
  fc
    .tuple(targets, fc.integer({ min: 1, max: (1 << MAX_BATCH) - 1 }), fc.constant(null))
    .map(([t, mask, extra]) => new Acknowledge(t, mask, extra)),
  fc.tuple(targets, fc.nat(), fc.boolean()).map(([t, pick, dead]) => new Fail(t, pick, dead)),
  fc.tuple(targets, fc.nat(), fc.boolean()).map(([t, pick, uncount]) => new Release(t, pick, uncount)),
  fc
    .tuple(targets, fc.integer({ min: 0, max: (1 << MAX_BATCH) - 1 }), fc.option(fc.nat(), { freq: 3 }), fc.boolean())
    .map(([t, mask, extra, uncount]) => new ReleaseMany(t, mask, extra, uncount)),
  fc.nat().map((pick) => new Expire(pick)),
  fc.nat().map((pick) => new Expire(pick)),
];

describe.each(BACKENDS)('the claim protocol as a state machine on %s', (backend) => {
  let app: TestApp;
  let store: OutboxStore;

  beforeAll(async () => {
    app = await createTestApp({ backend, outbox: { retry: { maxAttempts: MAX_ATTEMPTS } } });
    store = app.store;
  });
  afterAll(() => app?.dispose());

  it(`keeps every invariant over ${RUNS} random sequences of up to ${MAX_COMMANDS} commands`, async () => {
    tally.clear();
    // size 'max': without it fast-check keeps sequences far shorter than maxCommands.
    const sequences = fc.commands(commandArbitraries, { maxCommands: MAX_COMMANDS, size: 'max' });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 6 }), sequences, async (initial, commands) => {
        // One table for all runs: emptying it is much faster than a new app per run.
        await app.raw.query(`DELETE FROM "${app.table}"`);
        const setup = async () => {
          const model: Model = { events: new Map(), held: Array.from({ length: WORKERS }, () => []) };
          const real: Real = { app, store, clock: clockSql(backend), rows: new Map(), finals: new Map() };
          if (initial > 0) await new Publish(initial).run(model, real);
          return { model, real };
        };
        await fc.asyncModelRun(setup, commands);
      }),
      { numRuns: RUNS },
    );

    // The sequences must actually reach the situations the invariants are about.
    const seen = (pattern: RegExp) => [...tally].filter(([what]) => pattern.test(what)).reduce((n, [, k]) => n + k, 0);
    const summary = JSON.stringify(Object.fromEntries(tally), null, 1);
    for (const situation of [
      /^acknowledge applied$/,
      /^fail applied \(retry\)$/,
      /^fail applied \(dead letter\)$/,
      /^release applied \(uncounted\)$/,
      /^release applied \(counted\)$/,
      /^releaseMany applied$/,
      /^claim took over an expired lease$/,
      /^claim dead-lettered an expired last attempt$/,
      /^claim dead-lettered a given-back last attempt$/,
      / applied after its lease expired$/,
      /: another claim holds the event$/,
      /: the event is delivered$/,
      /: the event is dead$/,
      /: the event was given back$/,
      /: a token no claim issued$/,
    ]) {
      check(seen(situation) > 0, () => `no run reached ${situation}; tally: ${summary}`);
    }
  });
});
