// @ts-check
/**
 * The outbox admin page (docs/admin.md): one module, no dependencies, no build step, talking to
 * `<base>/api/v1`. Everything that comes from the server is written as text (h() appends strings as
 * text nodes): an event's payload, error or topic can never become markup.
 */

/** @typedef {{ header: string, token: string }} Csrf */
/** @typedef {{ version: number, readOnly: boolean, csrf: Csrf | null, refreshMs: number, stalledAfterMs: number, actor: string | null }} Session */
/** @typedef {{ dryRun: boolean, matched: number, changed: number, skipped: Array<{ id: string, reason: string }>, auditId: string | null }} Result */
/** @typedef {{ ids: string[] } | { filter: Record<string, string | string[]> } | { group: { topic: string, fingerprint: string } }} OutboxSelection */
/** @typedef {{ signal: AbortSignal, params: URLSearchParams, id?: string }} Ctx */
/** @typedef {Node | string | number | null | undefined | false} Child */

const BASE = (document.documentElement.dataset.base ?? '').replace(/\/+$/, '');
const API = `${BASE}/api/v1`;
const PAGE_SIZE = 50;

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
const main = byId('main');
const alertBox = byId('alert');
const statusBox = byId('status');
const dialog = /** @type {HTMLDialogElement} */ (byId('confirm'));
const confirmOk = /** @type {HTMLButtonElement} */ (byId('confirm-ok'));
const confirmCancel = /** @type {HTMLButtonElement} */ (byId('confirm-cancel'));

/** @type {Session} */
let session = { version: 1, readOnly: true, csrf: null, refreshMs: 5000, stalledAfterMs: 60000, actor: null };
/** Mutation buttons only once the server said so: an unread session shows none. */
let canChange = false;

// ---------------------------------------------------------------------------------------------- DOM

/**
 * An element with attributes (functions become listeners) and children (strings become text nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown> | null} [attrs]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function') el.addEventListener(name.replace(/^on/, ''), /** @type {EventListener} */ (value));
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(typeof child === 'number' ? String(child) : child);
  }
  return el;
}

const numbers = new Intl.NumberFormat();
/** @param {number | null | undefined} n */
const num = (n) => (n === null || n === undefined ? '—' : numbers.format(n));
/** @param {number} n @param {string} one @param {string} [many] */
const plural = (n, one, many = `${one}s`) => `${num(n)} ${n === 1 ? one : many}`;
/** @param {number} n @param {number} [width] */
const pad = (n, width = 2) => String(n).padStart(width, '0');
const dash = () => h('span', { class: 'muted' }, '—');

/** @param {Date} d */
const localDay = (d) => `${pad(d.getFullYear(), 4)}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
/** @param {Date} d */
const localTime = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

/** A time as local `YYYY-MM-DD HH:MM:SS`, the exact ISO time in its `datetime` and title. */
function time(/** @type {unknown} */ iso) {
  if (iso === null || iso === undefined || iso === '') return dash();
  const d = new Date(String(iso));
  if (Number.isNaN(d.getTime())) return h('span', null, String(iso));
  return h('time', { datetime: d.toISOString(), title: d.toISOString() }, `${localDay(d)} ${localTime(d)}`);
}

/** @type {Array<[string, number]>} */
const UNITS = [['d', 86_400_000], ['h', 3_600_000], ['min', 60_000], ['s', 1000]];
/** A duration in its two largest units: "850 ms", "12 s", "3 min 5 s", "2 d 4 h". */
function duration(/** @type {number} */ ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const i = UNITS.findIndex(([, size]) => ms >= size);
  const [unit, size] = UNITS[i];
  const whole = Math.floor(ms / size);
  const next = UNITS[i + 1];
  const rest = next && whole < 10 ? Math.floor((ms % size) / next[1]) : 0;
  return rest ? `${whole} ${unit} ${rest} ${next[0]}` : `${whole} ${unit}`;
}

/** UUIDv7 ids share their leading time digits: the tail tells neighbours apart. */
const shortId = (/** @type {string} */ id) => (id.length > 16 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id);
const eventHref = (/** @type {string} */ id) => `${BASE}/events/${encodeURIComponent(id)}`;
/** @param {Record<string, string> | URLSearchParams} [query] */
function eventsHref(query) {
  const qs = new URLSearchParams(query).toString();
  return `${BASE}/events${qs ? `?${qs}` : ''}`;
}
/** A link to an event: shortened on screen, its full id as title and accessible name. */
const eventLink = (/** @type {string} */ id) =>
  h('a', { href: eventHref(id), title: id, 'aria-label': id, class: 'mono' }, shortId(id));
const stateTag = (/** @type {string} */ state) =>
  h('span', { class: `state state-${String(state).replace(/[^a-z_]/g, '')}` }, String(state));

/** @param {string} text @param {string} [cls] */
function th(text, cls) {
  return h('th', { scope: 'col', class: cls }, text);
}
/**
 * A table in a box of its own that scrolls sideways on a narrow screen (the page itself never does).
 * @param {string} label
 * @param {Array<string | HTMLElement>} columns
 * @param {HTMLTableSectionElement} body
 * @param {string} [cls]
 */
function table(label, columns, body, cls = '') {
  const head = h('tr', null, columns.map((c) => (typeof c === 'string' ? th(c) : c)));
  return h(
    'div',
    { class: `scroll ${cls}`, role: 'region', 'aria-label': label, tabindex: 0 },
    h('table', { 'aria-label': label }, h('thead', null, head), body),
  );
}
/** A cell cut to one line by CSS, its whole text in the title. */
function cutCell(/** @type {string | null | undefined} */ text, cls = '') {
  return text ? h('td', { class: `cut ${cls}`, title: text }, text) : h('td', null, dash());
}
const numCell = (/** @type {number | null | undefined} */ n) => h('td', { class: 'num' }, num(n));

/** @param {string} text */
const emptyNote = (text) => h('p', { class: 'empty' }, text);

// ------------------------------------------------------------------------------------ messages

let alertSource = '';
/** Shows an error in the alert region; an aborted request (the view was left) is no error. */
function showError(/** @type {unknown} */ error, source = 'view') {
  if (error instanceof DOMException && error.name === 'AbortError') return;
  alertSource = source;
  alertBox.textContent = errorText(error);
}
/** @param {string} [source] only the alert this source raised */
function clearAlert(source) {
  if (source === undefined || alertSource === source) alertBox.textContent = '';
}
let statusTimer = 0;
function setStatus(/** @type {string} */ text) {
  clearTimeout(statusTimer);
  statusBox.textContent = text;
  // A toast that stays would cover the page on a phone.
  if (text) statusTimer = window.setTimeout(() => (statusBox.textContent = ''), 20_000);
}

// ---------------------------------------------------------------------------------------- API

class ApiError extends Error {
  /** @param {number} status @param {string} message */
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** @param {unknown} error */
function errorText(error) {
  if (error instanceof ApiError) {
    return error.status === 401 || error.status === 403 ? `Not allowed: ${error.message}` : error.message;
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * A call to the JSON API: GET without a body, POST (with the CSRF header) with one.
 * @param {string} path
 * @param {{ body?: unknown, signal?: AbortSignal | null }} [options]
 * @returns {Promise<any>}
 */
async function api(path, { body, signal } = {}) {
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    if (session.csrf) headers[session.csrf.header] = session.csrf.token;
  }
  let response;
  try {
    response = await fetch(API + path, {
      method: body === undefined ? 'GET' : 'POST',
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
      signal: signal ?? undefined,
    });
  } catch (error) {
    if (signal?.aborted) throw error;
    throw new ApiError(0, `The server could not be reached (${errorText(error)})`);
  }
  const text = await response.text();
  let data;
  try {
    data = text === '' ? null : JSON.parse(text);
  } catch {
    data = undefined;
  }
  if (!response.ok) {
    const message = data && typeof data === 'object' && 'message' in data ? [data.message].flat().join('; ') : '';
    throw new ApiError(response.status, String(message || `${response.status} ${response.statusText}`.trim()));
  }
  if (data === undefined) throw new ApiError(response.status, `${path}: the answer is not JSON`);
  return data;
}

// ------------------------------------------------------------------------------------ actions

/**
 * @typedef {{ path: string, title: string, noun: string, done: string, warn?: string,
 *   question: (n: string, scope: string) => string }} ActionSpec
 */
/** @type {Record<'redrive' | 'discard' | 'deliverNow', ActionSpec>} */
const ACTIONS = {
  redrive: {
    path: '/redrive',
    title: 'Redrive',
    noun: 'dead letter',
    done: 'redriven',
    question: (n, scope) => `Redrive ${n}${scope}?`,
  },
  discard: {
    path: '/discard',
    title: 'Discard',
    noun: 'dead letter',
    done: 'discarded',
    warn: 'Discarded events are deleted for good; their dedupe keys become free.',
    question: (n, scope) => `Discard ${n}${scope}?`,
  },
  deliverNow: {
    path: '/deliver-now',
    title: 'Deliver now',
    noun: 'scheduled event',
    done: 'made due now',
    question: (n, scope) => `Deliver ${n}${scope} now?`,
  },
};

/** "3 skipped (2 delivered, 1 not-found)" */
function skippedText(/** @type {Result['skipped']} */ skipped) {
  /** @type {Map<string, number>} */
  const reasons = new Map();
  for (const s of skipped) reasons.set(s.reason, (reasons.get(s.reason) ?? 0) + 1);
  const why = [...reasons].map(([reason, n]) => `${num(n)} ${reason.replace('_', ' ')}`).join(', ');
  return `${num(skipped.length)} skipped (${why})`;
}

/**
 * The confirmation after a dry run. Resolves with the options to send, or null (Cancel, Escape).
 * @param {ActionSpec} spec @param {Result} dry @param {string} scope
 * @returns {Promise<Record<string, boolean> | null>}
 */
function confirmAction(spec, dry, scope) {
  const n = dry.matched;
  const skipped = dry.skipped ?? [];
  const parts = [
    h(
      'p',
      { class: 'question' },
      n > 0 ? spec.question(plural(n, spec.noun), scope) : `Nothing to ${spec.title.toLowerCase()}: 0 ${spec.noun}s${scope}.`,
    ),
  ];
  if (skipped.length > 0) parts.push(h('p', null, `${skippedText(skipped)}: left as they are.`));
  if (n > 0 && spec.warn) parts.push(h('p', { class: 'warn' }, spec.warn));
  /** @type {HTMLInputElement | null} */
  let reset = null;
  if (n > 0 && spec === ACTIONS.redrive) {
    reset = h('input', { type: 'checkbox', id: 'confirm-reset', checked: true });
    parts.push(h('p', { class: 'check' }, reset, h('label', { for: 'confirm-reset' }, 'Reset attempts to 0')));
  }
  byId('confirm-title').textContent = spec.title;
  byId('confirm-body').replaceChildren(...parts);
  confirmOk.disabled = n === 0;
  dialog.returnValue = '';
  const opener = document.activeElement;
  dialog.showModal();
  confirmCancel.focus();
  return new Promise((resolve) => {
    dialog.addEventListener(
      'close',
      () => {
        if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
        if (dialog.returnValue !== 'confirm') return resolve(null);
        resolve(reset ? { resetAttempts: reset.checked } : {});
      },
      { once: true },
    );
  });
}
confirmOk.addEventListener('click', () => dialog.close('confirm'));
confirmCancel.addEventListener('click', () => dialog.close('cancel'));

let acting = false;
/**
 * Dry run, confirmation, the change, its result in the status region, then `after` (a reload).
 * @param {keyof ACTIONS} action @param {OutboxSelection} selection @param {string} scope
 * @param {() => unknown} after
 */
async function act(action, selection, scope, after) {
  if (acting) return;
  acting = true;
  const spec = ACTIONS[action];
  setStatus('');
  clearAlert();
  try {
    const dry = /** @type {Result} */ (await api(spec.path, { body: { selection, dryRun: true } }));
    const options = await confirmAction(spec, dry, scope);
    if (!options) return;
    setStatus(`${spec.title}…`);
    const done = /** @type {Result} */ (await api(spec.path, { body: { selection, ...options } }));
    const skipped = done.skipped?.length ? `, ${skippedText(done.skipped)}` : '';
    setStatus(`${num(done.changed)} ${spec.done}${skipped}`);
    await after();
    // The reload may have removed the button that had focus: keyboard users resume at the heading.
    if (!document.activeElement || document.activeElement === document.body) {
      main.querySelector('h1')?.focus({ preventScroll: true });
    }
  } catch (error) {
    setStatus('');
    showError(error);
  } finally {
    acting = false;
  }
}

/** @param {string} text @param {() => unknown} onclick @param {string} [cls] */
const button = (text, onclick, cls) => h('button', { type: 'button', class: cls, onclick }, text);

// ------------------------------------------------------------------------------------ routing

/** @type {Record<string, string>} */
const TITLES = {
  overview: 'Overview',
  events: 'Events',
  failures: 'Failure groups',
  keys: 'Blocked keys',
  audit: 'Audit trail',
  missing: 'Not found',
};

/** The view of the current URL: `<base>`, `<base>/events`, `<base>/events/<id>`, `/failures`, `/keys`, `/audit`. */
function parseRoute() {
  const path = location.pathname;
  const rest = (path.startsWith(BASE) ? path.slice(BASE.length) : path).replace(/\/+$/, '');
  if (rest === '') return { name: 'overview' };
  const match = /^\/(events|failures|keys|audit)(?:\/([^/]+))?$/.exec(rest);
  if (!match) return { name: 'missing' };
  if (match[2] === undefined) return { name: match[1] };
  if (match[1] !== 'events') return { name: 'missing' };
  try {
    return { name: 'event', id: decodeURIComponent(match[2]) };
  } catch {
    return { name: 'missing' };
  }
}

/** Paths this page renders itself; the API and assets are left to the browser. */
function isPagePath(/** @type {string} */ path) {
  if (path === BASE || path === `${BASE}/`) return true;
  return path.startsWith(`${BASE}/`) && !/^\/(api|assets)\//.test(path.slice(BASE.length));
}

function navigate(/** @type {string} */ href) {
  const url = new URL(href, location.href);
  if (url.href !== location.href) history.pushState(null, '', url);
  window.scrollTo(0, 0);
  render(true);
}

let current = new AbortController();
let focusHeading = false;
let rendered = '';

/** Replaces the view's content; after a navigation, focus goes to its heading (as a new page would). */
function mount(/** @type {Array<Node | string>} */ ...nodes) {
  main.replaceChildren(...nodes);
  main.removeAttribute('aria-busy');
  if (focusHeading) main.querySelector('h1')?.focus();
  focusHeading = false;
}
const heading = (/** @type {string} */ text) => h('h1', { tabindex: -1 }, text);

async function render(/** @type {boolean} */ focus) {
  current.abort();
  current = new AbortController();
  const { signal } = current;
  poll.fill = null;
  clearTimeout(poll.timer);
  focusHeading = focus;
  if (location.pathname + location.search !== rendered && !acting) setStatus('');
  rendered = location.pathname + location.search;
  // A session that could not be read stays reported: it is why no action shows.
  if (alertSource !== 'session') clearAlert();
  const route = parseRoute();
  const title = route.name === 'event' ? `Event ${route.id}` : TITLES[route.name];
  document.title = `${title} · Outbox admin`;
  for (const link of Array.from(document.querySelectorAll('nav a[data-view]'))) {
    const view = link.getAttribute('data-view');
    if (view === route.name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
    link.classList.toggle('section', route.name === 'event' && view === 'events');
  }
  main.setAttribute('aria-busy', 'true');
  main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  const ctx = { signal, params: new URLSearchParams(location.search), id: route.id };
  try {
    await VIEWS[route.name](ctx);
  } catch (error) {
    if (signal.aborted) return;
    showError(error);
    mount(heading(title), emptyNote('This view could not be loaded.'));
  }
}

document.addEventListener('click', (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
    return;
  }
  const link = event.target instanceof Element ? event.target.closest('a[href]') : null;
  if (!(link instanceof HTMLAnchorElement) || link.target || link.hasAttribute('download')) return;
  const href = link.getAttribute('href') ?? '';
  if (href.startsWith('#')) {
    // The skip link: focus the target without putting a hash in the shareable URL.
    event.preventDefault();
    document.getElementById(href.slice(1))?.focus();
    return;
  }
  const url = new URL(link.href);
  if (url.origin !== location.origin || !isPagePath(url.pathname)) return;
  event.preventDefault();
  navigate(url.href);
});
window.addEventListener('popstate', () => {
  if (location.pathname + location.search !== rendered) render(true);
});
window.addEventListener('unhandledrejection', (event) => showError(event.reason));

// ----------------------------------------------------------------------------------- overview

/** @type {{ timer: number, busy: boolean, last: number, data: any, fill: ((data: any) => void) | null, signal: AbortSignal | null }} */
const poll = { timer: 0, busy: false, last: 0, data: null, fill: null, signal: null };

/** The next refresh, `refreshMs` after the last one started; none while the tab is hidden. */
function schedulePoll() {
  clearTimeout(poll.timer);
  if (!poll.fill || document.hidden) return;
  poll.timer = window.setTimeout(pollNow, Math.max(0, poll.last + session.refreshMs - Date.now()));
}
async function pollNow() {
  const fill = poll.fill;
  if (!fill || poll.busy || document.hidden) return;
  poll.busy = true;
  poll.last = Date.now();
  try {
    const data = await api('/overview', { signal: poll.signal });
    poll.data = data;
    if (poll.fill === fill) {
      fill(data);
      clearAlert('poll');
    }
  } catch (error) {
    if (poll.fill === fill) showError(error, 'poll');
  } finally {
    poll.busy = false;
    schedulePoll();
  }
}
document.addEventListener('visibilitychange', schedulePoll);

/** @type {Array<[string, string, string]>} stats field, row name, filter status */
const COUNTS = [
  ['due', 'Due', 'due'],
  ['scheduled', 'Scheduled', 'scheduled'],
  ['inFlight', 'In flight', 'in_flight'],
  ['dead', 'Dead', 'dead'],
  ['delivered', 'Delivered', 'delivered'],
];

/** @param {{ kind: string, count: number }} badge */
function badgeItem(badge) {
  const { kind, count } = badge;
  if (kind === 'dead') return h('a', { class: 'badge bad', href: eventsHref({ status: 'dead' }) }, plural(count, 'dead letter'));
  if (kind === 'blocked') return h('a', { class: 'badge warn', href: `${BASE}/keys` }, plural(count, 'blocked key'));
  if (kind === 'stalled') {
    return h(
      'a',
      { class: 'badge bad', href: eventsHref({ status: 'due' }) },
      `Work due, nothing claimed: ${plural(count, 'event')} due, no claim for ${duration(session.stalledAfterMs)} or more`,
    );
  }
  return h('span', { class: 'badge' }, `${kind}: ${num(count)}`);
}

/** The overview: built once, then its text updated in place at each refresh (nothing moves). */
async function overviewView(/** @type {Ctx} */ ctx) {
  if (!poll.data || Date.now() - poll.last >= session.refreshMs) {
    poll.busy = true;
    poll.last = Date.now();
    try {
      poll.data = await api('/overview', { signal: ctx.signal });
    } finally {
      poll.busy = false;
    }
  }
  /** @type {Record<string, HTMLElement>} */
  const cells = {};
  const counts = h(
    'tbody',
    null,
    COUNTS.map(([field, name, status]) =>
      h('tr', null, h('th', { scope: 'row' }, h('a', { href: eventsHref({ status }) }, name)), (cells[field] = h('td', { class: 'num' }))),
    ),
  );
  const figure = (/** @type {string} */ label) => {
    const value = h('dd');
    return { value, nodes: [h('dt', null, label), value] };
  };
  const oldest = figure('Oldest due event waiting');
  const hour = figure('Delivered in the last hour');
  const minute = figure('Delivered in the last minute');
  const blocked = figure('Blocked keys');
  const claim = figure('Last claim');
  const at = figure('Figures as of');
  const badges = h('ul', { class: 'badges', 'aria-label': 'Problems' });
  const topics = h('tbody');

  const fill = (/** @type {any} */ data) => {
    const s = data.stats ?? {};
    for (const [field] of COUNTS) {
      const approx = field === 'delivered' && s.deliveredExact === false ? '≈ ' : '';
      cells[field].textContent = approx + num(s[field]);
    }
    if (s.deliveredExact === false) cells.delivered.title = 'An estimate: the table is too big to count delivered rows exactly';
    oldest.value.textContent = s.oldestDueAgeMs === null || s.oldestDueAgeMs === undefined ? 'none due' : duration(s.oldestDueAgeMs);
    hour.value.textContent = num(s.deliveredLastHour);
    minute.value.textContent = num(s.deliveredLastMinute);
    blocked.value.replaceChildren(s.blockedKeys > 0 ? h('a', { href: `${BASE}/keys` }, num(s.blockedKeys)) : num(s.blockedKeys));
    const ago = s.lastClaimAt && s.at ? Date.parse(s.at) - Date.parse(s.lastClaimAt) : NaN;
    // "ago" by the database clock, as of the figures: the browser's clock may differ.
    claim.value.replaceChildren(
      ...(s.lastClaimAt ? [time(s.lastClaimAt), Number.isNaN(ago) ? '' : ` (${duration(ago)} ago)`] : ['none recorded']),
    );
    at.value.replaceChildren(time(s.at));
    const list = /** @type {Array<{ kind: string, count: number }>} */ (data.badges ?? []);
    badges.replaceChildren(
      ...(list.length ? list.map((b) => h('li', null, badgeItem(b))) : [h('li', { class: 'muted' }, 'No problems found')]),
    );
    const rows = /** @type {any[]} */ (s.byTopic ?? []).map((t) =>
      h(
        'tr',
        null,
        h('td', { class: 'wrap' }, h('a', { href: eventsHref({ topic: t.topic }) }, t.topic)),
        numCell(t.due),
        numCell(t.scheduled),
        numCell(t.inFlight),
        numCell(t.dead),
        numCell(t.delivered),
      ),
    );
    topics.replaceChildren(...(rows.length ? rows : [h('tr', null, h('td', { colspan: 6, class: 'muted' }, 'No events'))]));
  };

  const numTh = (/** @type {string} */ text) => th(text, 'num');
  mount(
    heading('Overview'),
    badges,
    h(
      'div',
      { class: 'overview' },
      table('Counts by state', [th('State'), numTh('Events')], counts, 'counts'),
      h('dl', { class: 'figures' }, oldest.nodes, hour.nodes, minute.nodes, blocked.nodes, claim.nodes, at.nodes),
    ),
    h('h2', null, 'Topics'),
    table('Topics', [th('Topic'), numTh('Due'), numTh('Scheduled'), numTh('In flight'), numTh('Dead'), numTh('Delivered')], topics, 'topics'),
  );
  fill(poll.data);
  poll.fill = fill;
  poll.signal = ctx.signal;
  schedulePoll();
}

// ------------------------------------------------------------------------------------- events

const LIST_FIELDS = ['status', 'id'];
const FILTER_FIELDS = [...LIST_FIELDS, 'topic', 'key', 'dedupeKey', 'errorContains'];
const TIME_FIELDS = ['createdAfter', 'createdBefore', 'processedAfter', 'processedBefore'];

/** The filter of the URL as a selection takes it: times as ISO text, lists as arrays when several. */
function filterOf(/** @type {URLSearchParams} */ params) {
  /** @type {Record<string, string | string[]>} */
  const filter = {};
  for (const name of [...FILTER_FIELDS, ...TIME_FIELDS]) {
    const value = params.get(name);
    if (value === null || value.trim() === '') continue;
    if (!LIST_FIELDS.includes(name)) {
      filter[name] = value;
      continue;
    }
    const list = value.split(',').map((part) => part.trim()).filter(Boolean);
    filter[name] = list.length === 1 ? list[0] : list;
  }
  return filter;
}

/** An ISO time as a datetime-local input's value, in local time; '' when it is none. */
function toLocalInput(/** @type {string | null} */ iso) {
  const d = new Date(iso ?? '');
  if (!iso || Number.isNaN(d.getTime())) return '';
  const base = `${localDay(d)}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return d.getSeconds() ? `${base}:${pad(d.getSeconds())}` : base;
}

const STATUS_OPTIONS = [
  ['', 'any'],
  ['due', 'due'],
  ['scheduled', 'scheduled'],
  ['in_flight', 'in flight'],
  ['waiting', 'waiting'],
  ['pending', 'pending (due or scheduled)'],
  ['delivered', 'delivered'],
  ['dead', 'dead'],
];
const SEARCH_BY = [['id', 'id'], ['key', 'key'], ['dedupeKey', 'dedupe key']];

/** @param {string} id @param {string} label @param {HTMLElement} control */
const field = (id, label, control) => h('div', { class: 'field' }, h('label', { for: id }, label), control);
/** @param {Array<string[]>} options @param {string} value */
function select(/** @type {string} */ id, options, value) {
  const el = h('select', { id }, options.map(([v, text]) => h('option', { value: v }, text)));
  // A shared link may ask for several states: kept as one more option.
  if (!options.some(([v]) => v === value)) el.append(h('option', { value }, value.replaceAll(',', ', ')));
  el.value = value;
  return el;
}

/** The filter form, filled from the URL; applying it writes a new URL. */
function filterForm(/** @type {URLSearchParams} */ params) {
  const text = (/** @type {string} */ id, /** @type {string} */ name, type = 'text') =>
    h('input', { id, type, value: params.get(name) ?? '', autocomplete: 'off', spellcheck: 'false' });
  const dateInput = (/** @type {string} */ id, /** @type {string} */ name) =>
    h('input', { id, type: 'datetime-local', step: 1, value: toLocalInput(params.get(name)) });
  const status = select('f-status', STATUS_OPTIONS, params.get('status') ?? '');
  const topic = text('f-topic', 'topic');
  topic.placeholder = 'order.placed, order.*, billing.#';
  const key = text('f-key', 'key');
  const error = text('f-error', 'errorContains');
  const after = dateInput('f-after', 'createdAfter');
  const before = dateInput('f-before', 'createdBefore');
  const order = select('f-order', [['newest', 'newest first'], ['oldest', 'oldest first']], params.get('order') === 'oldest' ? 'oldest' : 'newest');
  const by = select('f-by', SEARCH_BY, params.has('id') ? 'id' : params.has('dedupeKey') ? 'dedupeKey' : 'id');
  const search = h('input', { id: 'f-q', type: 'search', autocomplete: 'off', spellcheck: 'false', value: params.get('id') ?? params.get('dedupeKey') ?? '' });

  const submit = (/** @type {Event} */ event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (status.value) next.set('status', status.value);
    for (const [name, input] of /** @type {const} */ ([['topic', topic], ['key', key], ['errorContains', error]])) {
      if (input.value.trim()) next.set(name, input.value.trim());
    }
    for (const [name, input] of /** @type {const} */ ([['createdAfter', after], ['createdBefore', before]])) {
      if (!input.value) continue;
      const d = new Date(input.value);
      if (Number.isNaN(d.getTime())) return showError(new Error(`Not a time: ${input.value}`));
      next.set(name, d.toISOString());
    }
    // Filters the form has no field for, from a shared link, are kept.
    for (const name of ['processedAfter', 'processedBefore']) if (params.get(name)) next.set(name, String(params.get(name)));
    const q = search.value.trim();
    if (q && by.value === 'id') next.set('id', q.split(/[\s,]+/).filter(Boolean).join(','));
    else if (q) next.set(by.value, q);
    if (order.value === 'oldest') next.set('order', 'oldest');
    navigate(eventsHref(next));
  };

  return h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter events', onsubmit: submit },
    field('f-status', 'State', status),
    field('f-topic', 'Topic', topic),
    field('f-key', 'Key', key),
    field('f-error', 'Error contains', error),
    field('f-after', 'Created after', after),
    field('f-before', 'Created before', before),
    field('f-order', 'Order', order),
    field('f-by', 'Search by', by),
    field('f-q', 'Search', search),
    h('div', { class: 'field buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Apply'), h('a', { href: eventsHref() }, 'Clear filters')),
  );
}

async function eventsView(/** @type {Ctx} */ ctx) {
  const { params, signal } = ctx;
  const filter = filterOf(params);
  /** @type {Set<string>} */
  const selected = new Set();
  const rows = h('tbody');
  const note = h('p', { class: 'muted' }, 'Loading…');
  const count = h('span', { class: 'count' }, 'No event selected');
  const all = h('input', { type: 'checkbox', 'aria-label': 'Select all on this page' });
  const next = h('button', { type: 'button', disabled: true }, 'Next page');
  const first = h('button', { type: 'button', disabled: !params.has('cursor') }, 'First page');
  /** @type {HTMLButtonElement[]} */
  const onSelected = [];

  const selectionChanged = () => {
    count.textContent = selected.size ? `${num(selected.size)} selected` : 'No event selected';
    for (const b of onSelected) b.disabled = selected.size === 0;
    const boxes = rows.querySelectorAll('input[type=checkbox]');
    all.checked = boxes.length > 0 && selected.size === boxes.length;
    all.indeterminate = selected.size > 0 && selected.size < boxes.length;
  };
  all.addEventListener('change', () => {
    for (const box of Array.from(rows.querySelectorAll('input[type=checkbox]'))) {
      const input = /** @type {HTMLInputElement} */ (box);
      input.checked = all.checked;
      if (all.checked) selected.add(input.value);
      else selected.delete(input.value);
    }
    selectionChanged();
  });

  const load = async () => {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(filter)) query.set(name, [value].flat().join(','));
    if (params.get('order') === 'oldest') query.set('order', 'oldest');
    if (params.get('cursor')) query.set('cursor', String(params.get('cursor')));
    query.set('limit', String(PAGE_SIZE));
    const page = await api(`/events?${query}`, { signal });
    selected.clear();
    rows.replaceChildren(
      ...page.items.map((/** @type {any} */ e) =>
        h(
          'tr',
          null,
          canChange &&
            h(
              'td',
              { class: 'pick' },
              h('input', {
                type: 'checkbox',
                value: e.id,
                'aria-label': `Select ${e.id}`,
                onchange: (/** @type {Event} */ ev) => {
                  if (/** @type {HTMLInputElement} */ (ev.target).checked) selected.add(e.id);
                  else selected.delete(e.id);
                  selectionChanged();
                },
              }),
            ),
          h('td', null, eventLink(e.id)),
          h('td', { class: 'wrap' }, e.topic),
          e.key === null ? h('td', null, dash()) : h('td', { class: 'wrap' }, e.key),
          h('td', null, stateTag(e.state)),
          numCell(e.attempts),
          h('td', null, time(e.createdAt)),
          cutCell(e.lastError ?? e.note, 'error'),
        ),
      ),
    );
    note.textContent = page.items.length
      ? `${plural(page.items.length, 'event')} on this page${page.nextCursor ? '' : ', the last one'}`
      : params.has('cursor') ? 'No more events.' : 'No event matches this filter.';
    next.disabled = !page.nextCursor;
    next.onclick = () => {
      const to = new URLSearchParams(params);
      to.set('cursor', page.nextCursor);
      navigate(eventsHref(to));
    };
    selectionChanged();
  };
  first.addEventListener('click', () => {
    const to = new URLSearchParams(params);
    to.delete('cursor');
    navigate(eventsHref(to));
  });

  const reload = () => (signal.aborted ? undefined : load());
  const onIds = (/** @type {keyof ACTIONS} */ action) => {
    const b = button(ACTIONS[action].title, () =>
      act(action, { ids: [...selected] }, ` of the ${num(selected.size)} selected`, reload),
    );
    b.disabled = true;
    onSelected.push(b);
    return b;
  };
  const onFilter = (/** @type {keyof ACTIONS} */ action, /** @type {string} */ text) =>
    button(text, () => act(action, { filter }, Object.keys(filter).length ? ' matching the filter' : ' (no filter: every event)', reload));
  const actions =
    canChange &&
    h(
      'div',
      { class: 'bulk' },
      h('div', { class: 'bar', role: 'group', 'aria-label': 'Selected events' }, count, onIds('redrive'), onIds('discard'), onIds('deliverNow')),
      h(
        'div',
        { class: 'bar', role: 'group', 'aria-label': 'Every event matching the filter' },
        onFilter('redrive', 'Redrive all matching'),
        onFilter('discard', 'Discard all matching'),
        onFilter('deliverNow', 'Deliver all matching now'),
      ),
    );

  const columns = [th('Id'), th('Topic'), th('Key'), th('State'), th('Attempts', 'num'), th('Created'), th('Last error')];
  if (canChange) columns.unshift(h('th', { scope: 'col', class: 'pick' }, all));
  mount(
    heading('Events'),
    filterForm(params),
    actions || '',
    h('div', { class: 'list' }, table('Events', columns, rows, 'events'), note),
    h('div', { class: 'bar pager' }, first, next),
  );
  await load();
}

// -------------------------------------------------------------------------------------- event

/** @param {string} label @param {Child | Child[]} value */
const prop = (label, value) => [h('dt', null, label), h('dd', null, value ?? dash())];
const json = (/** @type {unknown} */ value) => h('pre', { class: 'json' }, JSON.stringify(value, null, 2) ?? String(value));

async function eventView(/** @type {Ctx} */ ctx) {
  const id = String(ctx.id);
  let e;
  try {
    e = await api(`/events/${encodeURIComponent(id)}`, { signal: ctx.signal });
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    return mount(heading(`Event ${id}`), emptyNote('No such event'), h('p', null, h('a', { href: eventsHref() }, 'All events')));
  }
  const reload = () => (ctx.signal.aborted ? undefined : eventView(ctx));
  const one = { ids: [e.id] };
  const buttons = [];
  if (canChange && e.state === 'dead') {
    buttons.push(button('Redrive', () => act('redrive', one, '', reload), 'primary'));
    buttons.push(button('Discard', () => act('discard', one, '', reload), 'danger'));
  }
  if (canChange && e.state === 'scheduled') buttons.push(button('Deliver now', () => act('deliverNow', one, '', reload), 'primary'));

  const keyLink = e.key === null ? null : h('a', { href: eventsHref({ key: e.key }) }, e.key);
  const details = h(
    'dl',
    { class: 'props' },
    prop('Topic', h('a', { href: eventsHref({ topic: e.topic }) }, e.topic)),
    prop('Key', keyLink),
    prop('Dedupe key', e.dedupeKey),
    prop('State', stateTag(e.state)),
    prop('Attempts', num(e.attempts)),
    prop('Redrives', num(e.redriveCount)),
    prop('Created', time(e.createdAt)),
    prop('Processed', time(e.processedAt)),
    prop('Due at', time(e.dueAt)),
    prop('Lease expires', time(e.leaseExpiresAt)),
    prop('Note', e.note),
    prop('Succeeded earlier', e.succeededEarlier?.length ? e.succeededEarlier.join(', ') : null),
    prop('Payload size', e.payloadBytes === undefined ? null : plural(e.payloadBytes, 'byte')),
  );

  let payload;
  if (e.payloadTruncated) {
    const preview = String(e.payloadPreview ?? '');
    const shown = new TextEncoder().encode(preview).length;
    payload = [
      h('p', { class: 'warn' }, `payload cut: ${num(e.payloadBytes)} bytes, first ${num(shown)} shown`),
      h('pre', { class: 'json' }, preview),
    ];
  } else payload = json(e.payload);

  const history = /** @type {any[]} */ (e.history ?? []);
  const attempts = history.length
    ? table(
        'Attempts',
        [th('Attempt', 'num'), th('Round', 'num'), th('Outcome'), th('Started'), th('Duration', 'num'), th('Error')],
        h(
          'tbody',
          null,
          history.map((a) =>
            h(
              'tr',
              null,
              numCell(a.attempt),
              numCell(a.round),
              h('td', null, stateTag(a.outcome)),
              h('td', null, time(a.startedAt)),
              h('td', { class: 'num' }, a.durationMs === null || a.durationMs === undefined ? dash() : duration(a.durationMs)),
              a.error ? h('td', { class: 'long error' }, a.error) : h('td', null, dash()),
            ),
          ),
        ),
      )
    : emptyNote('No attempt yet.');

  const keyEvents = /** @type {any[]} */ (e.keyEvents ?? []);
  let keySection;
  if (e.key === null) keySection = emptyNote('No key: this event is not ordered with others.');
  else if (keyEvents.length === 0) keySection = emptyNote('No unfinished event of this key.');
  else {
    keySection = [
      h('p', null, 'Unfinished events of key ', h('span', { class: 'mono' }, e.key), ', oldest first:'),
      table(
        'Unfinished events of its key',
        ['Event', 'State', 'Created'],
        h(
          'tbody',
          null,
          keyEvents.map((k) =>
            h(
              'tr',
              { class: k.id === e.id ? 'self' : undefined },
              h('td', null, k.id === e.id ? [h('span', { class: 'mono', title: k.id }, shortId(k.id)), ' (this event)'] : eventLink(k.id)),
              h('td', null, stateTag(k.state)),
              h('td', null, time(k.createdAt)),
            ),
          ),
        ),
      ),
    ];
  }

  mount(
    heading(`Event ${e.id}`),
    buttons.length ? h('div', { class: 'bar', role: 'group', 'aria-label': 'Actions on this event' }, buttons) : '',
    details,
    h('section', null, h('h2', null, 'Error'), e.lastError ? h('pre', { class: 'error' }, e.lastError) : emptyNote('No error recorded.')),
    h('section', null, h('h2', null, 'Payload'), payload),
    h('section', null, h('h2', null, 'Headers'), json(e.headers)),
    h(
      'section',
      null,
      h('h2', null, 'Attempts'),
      e.historyOmitted > 0 ? h('p', { class: 'muted' }, `${plural(e.historyOmitted, 'earlier attempt')} of this round not kept.`) : '',
      attempts,
    ),
    h('section', null, h('h2', null, 'Key'), keySection),
  );
}

// ------------------------------------------------------------------------- failures, keys, audit

async function failuresView(/** @type {Ctx} */ ctx) {
  const groups = /** @type {any[]} */ (await api('/failure-groups', { signal: ctx.signal }));
  const reload = () => (ctx.signal.aborted ? undefined : failuresView(ctx));
  const columns = ['Topic', th('Dead letters', 'num'), 'Error', 'First seen', 'Last seen', 'Sample'];
  if (canChange) columns.push('Actions');
  const rows = groups.map((g) => {
    const group = { group: { topic: g.topic, fingerprint: g.fingerprint } };
    return h(
      'tr',
      null,
      h('td', { class: 'wrap' }, h('a', { href: eventsHref({ status: 'dead', topic: g.topic }) }, g.topic)),
      numCell(g.count),
      h('td', { class: 'long error', title: g.sampleError ?? undefined }, g.signature),
      h('td', null, time(g.firstSeen)),
      h('td', null, time(g.lastSeen)),
      h('td', null, eventLink(g.sampleId)),
      canChange &&
        h(
          'td',
          { class: 'actions' },
          h(
            'div',
            null,
            button('Redrive group', () => act('redrive', group, ' of this failure group', reload)),
            button('Discard group', () => act('discard', group, ' of this failure group', reload), 'danger'),
          ),
        ),
    );
  });
  mount(
    heading('Failure groups'),
    h('p', { class: 'muted' }, 'Dead letters grouped by topic and by their error, numbers and ids masked; biggest first.'),
    groups.length ? table('Failure groups', columns, h('tbody', null, rows)) : emptyNote('No dead letters.'),
  );
}

async function keysView(/** @type {Ctx} */ ctx) {
  const keys = /** @type {any[]} */ (await api('/blocked-keys', { signal: ctx.signal }));
  const reload = () => (ctx.signal.aborted ? undefined : keysView(ctx));
  const columns = ['Key', 'Topic', 'Head', th('Attempts', 'num'), 'Error', 'Blocked since', th('Waiting', 'num')];
  if (canChange) columns.push('Actions');
  const rows = keys.map((k) => {
    const head = { ids: [k.headId] };
    return h(
      'tr',
      null,
      h('td', { class: 'wrap' }, h('a', { href: eventsHref({ key: k.key }) }, k.key)),
      h('td', { class: 'wrap' }, k.topic),
      h('td', null, eventLink(k.headId)),
      numCell(k.attempts),
      cutCell(k.error, 'error'),
      h('td', null, time(k.since)),
      numCell(k.waiting),
      canChange &&
        h(
          'td',
          { class: 'actions' },
          h(
            'div',
            null,
            button('Redrive head', () => act('redrive', head, ` at the head of key ${k.key}`, reload)),
            button('Discard head', () => act('discard', head, ` at the head of key ${k.key}`, reload), 'danger'),
          ),
        ),
    );
  });
  mount(
    heading('Blocked keys'),
    h('p', { class: 'muted' }, 'Keys of ordered topics stopped behind a dead head: redrive it (it goes first) or discard it (the next one goes on).'),
    keys.length ? table('Blocked keys', columns, h('tbody', null, rows)) : emptyNote('No blocked keys.'),
  );
}

async function auditView(/** @type {Ctx} */ ctx) {
  const cursor = ctx.params.get('cursor');
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (cursor) query.set('cursor', cursor);
  const page = await api(`/audit?${query}`, { signal: ctx.signal });
  const items = /** @type {any[]} */ (page.items ?? []);
  const rows = items.map((a) => {
    const options = Object.entries(a.options ?? {})
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ');
    const selection = typeof a.selection === 'string' ? a.selection : JSON.stringify(a.selection);
    return h(
      'tr',
      null,
      h('td', null, time(a.at ?? a.startedAt)),
      a.actor ? h('td', { class: 'wrap' }, a.actor) : h('td', { class: 'muted' }, 'anonymous'),
      h('td', null, a.action, options ? h('span', { class: 'muted' }, ` (${options})`) : ''),
      cutCell(selection, 'mono'),
      numCell(a.matched),
      numCell(a.changed),
      a.outcome === 'failed' ? cutCell(`failed: ${a.error ?? ''}`, 'error') : h('td', null, a.outcome ?? dash()),
    );
  });
  const to = (/** @type {string | null} */ at) => () => navigate(`${BASE}/audit${at ? `?${new URLSearchParams({ cursor: at })}` : ''}`);
  const next = button('Next page', to(page.nextCursor));
  next.disabled = !page.nextCursor;
  const first = button('First page', to(null));
  first.disabled = !cursor;
  mount(
    heading('Audit trail'),
    items.length
      ? table('Audit trail', ['Time', 'Actor', 'Action', 'Selection', th('Matched', 'num'), th('Changed', 'num'), 'Outcome'], h('tbody', null, rows))
      : emptyNote(cursor ? 'No more entries.' : 'No mutation recorded yet.'),
    h('div', { class: 'bar pager' }, first, next),
  );
}

/** @type {Record<string, (ctx: Ctx) => Promise<void>>} */
const VIEWS = {
  overview: overviewView,
  events: eventsView,
  event: eventView,
  failures: failuresView,
  keys: keysView,
  audit: auditView,
  missing: async () => mount(heading('Not found'), emptyNote('This page has no such view.')),
};

// ---------------------------------------------------------------------------------------- start

async function start() {
  history.scrollRestoration = 'manual';
  try {
    const answer = await api('/session');
    session = { ...session, ...answer };
    session.refreshMs = Math.max(1000, Number(answer.refreshMs) || 5000);
    canChange = !answer.readOnly;
    if (answer.version !== 1) showError(new Error(`This page speaks version 1 of the API; the server answered version ${answer.version}.`));
    byId('mode').hidden = !answer.readOnly;
    byId('actor').textContent = answer.actor ?? '';
  } catch (error) {
    showError(error, 'session');
  }
  await render(false);
}
start();
