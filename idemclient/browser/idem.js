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
//   import { protect } from "/_idem/idem.js";
//   protect(document.querySelector("form#pay"));
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
function getItem(k) {
  const s = store();
  return s ? s.getItem(PREFIX + k) : memory.get(k) ?? null;
}
function setItem(k, v) {
  const s = store();
  if (s) s.setItem(PREFIX + k, v);
  else memory.set(k, v);
}
function removeItem(k) {
  const s = store();
  if (s) s.removeItem(PREFIX + k);
  else memory.delete(k);
}

/** keyFor returns the key of an action, creating it on first use. */
export function keyFor(action) {
  let k = getItem("key:" + action);
  if (!k) {
    k = newKey();
    setItem("key:" + action, k);
  }
  return k;
}

/** clearKey forgets an action's key (and its pending request). */
export function clearKey(action) {
  removeItem("key:" + action);
  removeItem("pending:" + action);
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
  let key = o.key || (o.action ? keyFor(o.action) : null);
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
 * a resubmit or a reload sends the same action again). A request that was
 * running when the page was reloaded is sent again, with its key, as soon
 * as protect runs on the new page. Returns { action, key(), submit() }.
 */
export function protect(form, opts = {}) {
  const o = { ...defaults, ...opts };
  const action = actionOf(form, o);
  keyFor(action);
  let running = null;
  const fire = (type, detail) => form.dispatchEvent(new CustomEvent(type, { detail }));

  function send(p) {
    const key = keyFor(action);
    const run = idemFetch(p.url, { method: p.method, body: p.body, headers: { "Content-Type": p.contentType } }, { ...o, key })
      .then(async (resp) => {
        const body = await resp.text();
        clearKey(action);
        keyFor(action); // the next action's key, from now
        fire("idem:done", { status: resp.status, body, replayed: resp.headers.get("Idempotent-Replayed") === "true", key });
        return resp;
      }, (error) => {
        if (error instanceof OutcomeUnknownError) {
          clearKey(action);
          keyFor(action);
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

  function submit() {
    if (running && o.debounce) return running;
    const method = (form.getAttribute("method") || "POST").toUpperCase();
    const p = {
      url: form.action,
      method,
      body: new URLSearchParams(new FormData(form)).toString(),
      contentType: "application/x-www-form-urlencoded",
    };
    setItem("pending:" + action, JSON.stringify(p));
    return send(p);
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  const pending = getItem("pending:" + action);
  if (pending) {
    try {
      send(JSON.parse(pending));
    } catch {
      removeItem("pending:" + action);
    }
  }
  return { action, key: () => keyFor(action), submit };
}
