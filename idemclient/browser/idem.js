// idem.js: the browser half of idempotency, for any server that
// deduplicates on an Idempotency-Key (idem proxy, httpidem, Stripe-style
// APIs). A dependency-free ES module; idem proxy serves it with
// --client-js PATH, and it works on its own.
//
// Each action (a form, a button) gets its key when it is shown, keeps it
// across double clicks, retries and a reload (sessionStorage), and gives
// it up once the action has a final answer. fetch is retried by the rules
// of the Go client (idemclient); docs/client.md has them. Front-end
// debouncing is only comfort: the server's deduplication is the guarantee.
//
// Keys and pending requests belong to one tab and one session: give
// protect (or configure) the app's session id, e.g. the signed-in user's
// id, and what another user left in the tab is never sent under this
// one. A request left pending (the page was reloaded or left while it
// ran) is never sent again by itself: the user's next submit of the same
// form, in the same session and within pendingTTL, sends it again with
// its key.
//
//   import { protect } from "/_idem/idem.js";
//   protect(document.querySelector("form#pay"), { session: currentUserId });
//   form.addEventListener("idem:done", (e) => show(e.detail.status, e.detail.body));

const PREFIX = "idem:";

const problemBase = "https://github.com/idemkit/idem/blob/main/httpidem/problems.md#";

/** Defaults of every option; override per call or with configure(). */
export const defaults = {
  header: "Idempotency-Key",
  spelling: "sf", // "sf": "k" (RFC 8941 sf-string); "bare": k
  methods: ["POST", "PATCH"],
  maxAttempts: 5,
  maxElapsed: 30000, // ms, first attempt to the start of the last one
  attemptTimeout: 10000, // ms, to the response headers
  baseDelay: 100, // ms, full-jitter backoff
  maxDelay: 5000,
  maxRetryAfter: 30000,
  budgetRatio: 0.1, // retries earned per request
  budgetCapacity: 10,
  debounce: true, // protect(): a second submit while one runs joins it
  onEvent: null, // function(event) for attempts, decisions and waits
  // The app's session: a string, or a function returning it, naming who is
  // signed in (a user id, or a session id readable by JS). Keys and
  // pending requests of another session are ignored and removed. With
  // HttpOnly session cookies the page cannot read the cookie: give an id
  // from the app. "" (the default) is one anonymous session.
  session: "",
  pendingTTL: 10 * 60 * 1000, // ms a pending request may be sent again (on the user's submit)
};

/** configure changes the defaults for the page. */
export function configure(opts) {
  Object.assign(defaults, opts);
  budget.tokens = Math.min(budget.tokens, defaults.budgetCapacity);
}

/** The error of a keyed request whose outcome is unknown: look it up. */
export class OutcomeUnknownError extends Error {
  constructor(key, status, replayed, attempts, cause) {
    super(`idem: outcome unknown for key ${key} after ${attempts} attempt(s)` + (status ? ` (last answer ${status})` : ""));
    this.name = "OutcomeUnknownError";
    this.key = key;
    this.status = status;
    this.replayed = replayed;
    this.attempts = attempts;
    this.cause = cause;
  }
}

/** The error of a request whose retries ended when nothing can have run. */
export class RetryError extends Error {
  constructor(key, attempts, reason, cause) {
    super(`idem: gave up after ${attempts} attempt(s) (${reason})`);
    this.name = "RetryError";
    this.key = key;
    this.attempts = attempts;
    this.reason = reason;
    this.cause = cause;
  }
}

/** newKey returns 128 random bits in 32 hex digits. */
export function newKey() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function store() {
  try {
    return window.sessionStorage;
  } catch {
    return null; // storage disabled: keys live as long as the page
  }
}
const memory = new Map();

// hash is a short, non-secret digest of a session id (FNV-1a, twice), so
// that the id itself is not copied into storage names.
function hash(str) {
  let a = 0x811c9dc5, b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < str.length; i++) {
    const c = str.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x01000193 + 0x100) >>> 0;
  }
  return a.toString(16).padStart(8, "0") + b.toString(16).padStart(8, "0");
}

// The tab's id. sessionStorage is per tab, but a tab opened with
// window.open gets a copy of its opener's: a page that finds a tab id in
// storage although it is the first page of a tab that has an opener
// (history of one entry, reached by navigation, not a reload) is such a
// copy, and takes a new id, so that the two tabs never share a key. The
// copied entries are removed.
let tabId = "";
function tab() {
  if (tabId) return tabId;
  const s = store();
  if (!s) return (tabId = "page");
  let id = s.getItem(PREFIX + "tab");
  let nav = "";
  try {
    nav = (performance.getEntriesByType("navigation")[0] || {}).type || "";
  } catch {
    nav = "";
  }
  const copied = !!id && !!window.opener && history.length === 1 && nav !== "reload" && nav !== "back_forward";
  if (!id || copied) {
    id = newKey().slice(0, 16);
    for (let i = s.length - 1; i >= 0; i--) {
      const k = s.key(i);
      if (k && k.startsWith(PREFIX)) s.removeItem(k);
    }
    s.setItem(PREFIX + "tab", id);
  }
  return (tabId = id);
}

function sessionOf(o) {
  const v = typeof o.session === "function" ? o.session() : o.session;
  return v == null ? "" : String(v);
}

// name is the storage name of an entry: the tab, the session's hash and
// the entry's own name, so that another tab's or another session's entry
// cannot be read by mistake.
function name(k, sess) {
  return tab() + ":" + hash(sess) + ":" + k;
}

function getItem(k, sess = "") {
  const s = store();
  return s ? s.getItem(PREFIX + name(k, sess)) : memory.get(name(k, sess)) ?? null;
}
function setItem(k, v, sess = "") {
  const s = store();
  if (s) s.setItem(PREFIX + name(k, sess), v);
  else memory.set(name(k, sess), v);
}
function removeItem(k, sess = "") {
  const s = store();
  if (s) s.removeItem(PREFIX + name(k, sess));
  else memory.delete(name(k, sess));
}

// dropOtherSessions removes this tab's entries of every session but sess:
// the user changed in this tab (a sign-out, another sign-in), and what the
// previous one left must never be sent under the new one.
function dropOtherSessions(sess) {
  const mine = PREFIX + tab() + ":" + hash(sess) + ":";
  const s = store();
  if (!s) {
    for (const k of [...memory.keys()]) if (!(PREFIX + k).startsWith(mine)) memory.delete(k);
    return;
  }
  for (let i = s.length - 1; i >= 0; i--) {
    const k = s.key(i);
    if (k && k.startsWith(PREFIX + tab() + ":") && !k.startsWith(mine)) s.removeItem(k);
  }
}

/**
 * keyFor returns the key of an action in this tab and session (opts.session,
 * or the configured one), creating it on first use.
 */
export function keyFor(action, opts = {}) {
  const sess = sessionOf({ ...defaults, ...opts });
  let k = getItem("key:" + action, sess);
  if (!k) {
    k = newKey();
    setItem("key:" + action, k, sess);
  }
  return k;
}

/** clearKey forgets an action's key (and its pending request). */
export function clearKey(action, opts = {}) {
  const sess = sessionOf({ ...defaults, ...opts });
  removeItem("key:" + action, sess);
  removeItem("pending:" + action, sess);
}

/**
 * forgetAll removes every key and pending request of this tab, of every
 * session: call it when the user signs out.
 */
export function forgetAll() {
  const s = store();
  memory.clear();
  if (!s) return;
  for (let i = s.length - 1; i >= 0; i--) {
    const k = s.key(i);
    if (k && k.startsWith(PREFIX + tab() + ":")) s.removeItem(k);
  }
}

// The page's retry budget: requests earn budgetRatio tokens, each retry
// spends one (docs/client.md).
const budget = { tokens: defaults.budgetCapacity };

function spell(key, spelling) {
  return spelling === "bare" ? key : '"' + key.replace(/[\\"]/g, (c) => "\\" + c) + '"';
}

function retryAfter(resp) {
  const v = resp.headers.get("Retry-After");
  if (v == null) return -1;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? -1 : Math.max(at - Date.now(), 0);
}

async function problemType(resp) {
  const ct = (resp.headers.get("Content-Type") || "").split(";")[0].trim().toLowerCase();
  if (ct !== "application/problem+json") return "";
  try {
    return (await resp.clone().json()).type || "";
  } catch {
    return "";
  }
}

const safeMethods = ["GET", "HEAD", "OPTIONS", "TRACE"];

/**
 * idemFetch is fetch with retries that carry one key. opts.key (or
 * opts.action, whose key is keyFor(action)) keys any method; POST and
 * PATCH get a new key otherwise. It resolves with the final Response
 * (resp.headers.get("Idempotent-Replayed") === "true" for a replay) and
 * rejects with OutcomeUnknownError or RetryError.
 */
export async function idemFetch(input, init = {}, opts = {}) {
  const o = { ...defaults, ...opts };
  const method = (init.method || "GET").toUpperCase();
  let key = o.key || (o.action ? keyFor(o.action, o) : null);
  const headers = new Headers(init.headers || {});
  if (headers.has(o.header)) key = headers.get(o.header).replace(/^"(.*)"$/, "$1");
  else if (!key && o.methods.includes(method)) key = newKey();
  if (!key && !safeMethods.includes(method)) return fetch(input, init);
  if (key && !headers.has(o.header)) headers.set(o.header, spell(key, o.spelling));
  const emit = (e) => o.onEvent && o.onEvent({ key, method, ...e });

  budget.tokens = Math.min(budget.tokens + o.budgetRatio, o.budgetCapacity);
  const start = Date.now();
  let reached = false;
  for (let n = 1; ; n++) {
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort(init.signal.reason);
    if (init.signal) {
      if (init.signal.aborted) ctrl.abort(init.signal.reason);
      else init.signal.addEventListener("abort", onAbort, { once: true });
    }
    let timedOut = false;
    const timer = o.attemptTimeout > 0 ? setTimeout(() => { timedOut = true; ctrl.abort(); }, o.attemptTimeout) : 0;
    let resp = null, err = null, reason = "", wait = -1, unknown = false;
    try {
      resp = await fetch(input, { ...init, headers, signal: ctrl.signal });
    } catch (e) {
      err = e;
    }
    if (resp) {
      const type = [409, 502, 503, 504].includes(resp.status) ? await problemType(resp) : "";
      if (resp.status === 409 && (type === problemBase + "in-flight" || resp.headers.has("Retry-After"))) {
        reason = "in_flight"; reached = true; wait = retryAfter(resp);
      } else if (resp.status === 429) {
        reason = "throttled"; wait = retryAfter(resp);
      } else if (resp.status === 503) {
        reason = "unavailable"; wait = retryAfter(resp);
        if (type === problemBase + "result-not-stored") reached = true;
      } else if ((resp.status === 502 || resp.status === 504) && type === problemBase + "outcome-unknown") {
        unknown = true;
      } else if ((resp.status === 502 || resp.status === 504) && type === problemBase + "upstream-unreachable") {
        reason = "upstream_unreachable"; wait = retryAfter(resp);
      }
    }
    clearTimeout(timer);
    if (init.signal) init.signal.removeEventListener("abort", onAbort);
    const replayed = !!resp && resp.headers.get("Idempotent-Replayed") === "true";
    const status = resp ? resp.status : 0;
    if (unknown) {
      emit({ kind: "attempt", attempt: n, status, replayed, decision: "outcome_unknown" });
      throw new OutcomeUnknownError(key, status, replayed, n, null);
    }
    if (err) {
      if (init.signal && init.signal.aborted) {
        emit({ kind: "attempt", attempt: n, error: err, decision: "give_up", reason: "deadline" });
        if (key) throw new OutcomeUnknownError(key, 0, false, n, err); // it may have reached
        throw err;
      }
      // A failed fetch cannot tell a refused connection from one that
      // broke after the request was written: it may have reached.
      reason = timedOut ? "attempt_timeout" : "transport";
      reached = true;
    }
    if (!reason) {
      emit({ kind: "attempt", attempt: n, status, replayed, decision: "done" });
      return resp;
    }
    let stop = "";
    if (n >= o.maxAttempts) stop = "attempts";
    else if (wait > o.maxRetryAfter) stop = "retry_after";
    if (!stop) {
      if (wait < 0) wait = Math.random() * Math.min(o.maxDelay, o.baseDelay * 2 ** (n - 1));
      if (Date.now() - start + wait > o.maxElapsed) stop = "elapsed";
      else if (budget.tokens < 1) stop = "budget";
      else budget.tokens -= 1;
    }
    if (stop) {
      emit({ kind: "attempt", attempt: n, status, error: err, decision: "give_up", reason: stop });
      if (resp && !reached) return resp;
      if (key && reached) throw new OutcomeUnknownError(key, status, replayed, n, err);
      throw new RetryError(key, n, stop, err);
    }
    if (resp && resp.body) resp.body.cancel().catch(() => {}); // not handed to anyone: free its connection
    emit({ kind: "attempt", attempt: n, status, error: err, decision: "retry", reason });
    emit({ kind: "wait", attempt: n + 1, duration: wait });
    await new Promise((res) => setTimeout(res, wait));
  }
}

function actionOf(form, opts) {
  return opts.action || form.dataset.idemAction || (form.method || "get").toUpperCase() + " " + form.action;
}

/**
 * protect gives a form its key now (when it is shown) and submits it with
 * idemFetch, as application/x-www-form-urlencoded. It dispatches on the
 * form "idem:done" ({status, body, replayed, key}) for a final answer,
 * "idem:unknown" ({key, status}) for an outcome-unknown one (the key is
 * then given up too: resubmitting is a new action), and "idem:error"
 * ({key, error}) when retries gave up without an answer (the key is kept:
 * a resubmit sends the same action again).
 *
 * Keys and pending requests are bound to this tab and to opts.session
 * (see defaults.session): entries of another session are removed when
 * protect runs and ignored at a submit. A request that was running when
 * the page was reloaded or left is never sent again by itself: protect
 * dispatches "idem:pending" ({key, age}), and the user's next submit of
 * the same form, with the same content, in the same session and within
 * opts.pendingTTL, sends it again with its key (so a request that reached
 * the service is answered from the stored result). A submit with other
 * content, or after pendingTTL, is a new action with a new key.
 * Returns { action, key(), submit() }.
 */
export function protect(form, opts = {}) {
  const o = { ...defaults, ...opts };
  const action = actionOf(form, o);
  const loadSession = sessionOf(o);
  dropOtherSessions(loadSession);
  keyFor(action, o);
  let running = null;
  const fire = (type, detail) => form.dispatchEvent(new CustomEvent(type, { detail }));

  function send(p, sess) {
    const so = { ...o, session: sess };
    const key = keyFor(action, so);
    const run = idemFetch(p.url, { method: p.method, body: p.body, headers: { "Content-Type": p.contentType } }, { ...o, key })
      .then(async (resp) => {
        const body = await resp.text();
        clearKey(action, so);
        keyFor(action, so); // the next action's key, from now
        fire("idem:done", { status: resp.status, body, replayed: resp.headers.get("Idempotent-Replayed") === "true", key });
        return resp;
      }, (error) => {
        if (error instanceof OutcomeUnknownError) {
          clearKey(action, so);
          keyFor(action, so);
          fire("idem:unknown", { key, status: error.status, error });
        } else {
          fire("idem:error", { key, error });
        }
        throw error;
      })
      .finally(() => { running = null; });
    run.catch(() => {});
    running = run;
    return run;
  }

  // pendingOf returns the pending request of sess if it is still fresh,
  // and forgets a stale one (with its key: the next submit is new).
  function pendingOf(sess) {
    const raw = getItem("pending:" + action, sess);
    if (!raw) return null;
    let p = null;
    try {
      p = JSON.parse(raw);
    } catch {
      p = null;
    }
    if (!p || typeof p.at !== "number" || Date.now() - p.at > o.pendingTTL || Date.now() < p.at) {
      clearKey(action, { session: sess });
      return null;
    }
    return p;
  }

  function submit() {
    if (running && o.debounce) return running;
    const sess = sessionOf(o);
    if (sess !== loadSession) dropOtherSessions(sess);
    const method = (form.getAttribute("method") || "POST").toUpperCase();
    const p = {
      url: form.action,
      method,
      body: new URLSearchParams(new FormData(form)).toString(),
      contentType: "application/x-www-form-urlencoded",
      at: Date.now(),
    };
    const prev = pendingOf(sess);
    if (prev && (prev.body !== p.body || prev.url !== p.url || prev.method !== p.method)) {
      // Other content: a new action, with a new key.
      clearKey(action, { session: sess });
    } else if (prev) {
      p.at = prev.at; // the same action sent again: it keeps its age
    }
    setItem("pending:" + action, JSON.stringify(p), sess);
    return send(p, sess);
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  const left = pendingOf(loadSession);
  if (left) {
    const key = keyFor(action, o);
    queueMicrotask(() => fire("idem:pending", { key, age: Date.now() - left.at }));
  }
  return { action, key: () => keyFor(action, o), submit };
}
