// stripe-node (Stripe's official Node SDK) against idem proxy, for
// scripts/stripe-node-refusals. Usage: node client.cjs PROXY_URL FORMAT.
// With FORMAT stripe every refusal must surface as a StripeError of the
// right class, and the SDK must not retry what cannot succeed
// (Stripe-Should-Retry: false); it exits 1 otherwise. With FORMAT problem
// it only reports what the SDK made of problem+json refusals.
'use strict';
const Stripe = require('stripe');
const [url, format] = process.argv.slice(2);
const u = new URL(url);
const stripe = new Stripe('sk_test_idem', { host: u.hostname, port: Number(u.port), protocol: 'http', maxNetworkRetries: 3 });
const attempts = {}; // idempotency key → requests sent
stripe.on('request', (e) => { attempts[e.idempotency_key] = (attempts[e.idempotency_key] || 0) + 1; });
const suffix = `${process.pid}`;
let failed = false;

// outcome makes one call and says what the application got: a result or
// an exception, and how many HTTP requests the SDK sent for it.
async function outcome(label, key, params) {
  const k = `${key}-${suffix}`;
  const before = attempts[k] || 0;
  const sent = () => (attempts[k] || 0) - before;
  try {
    const ch = await stripe.charges.create(params, { idempotencyKey: k });
    return { label, result: ch.id, requests: sent() };
  } catch (e) {
    return { label, error: e instanceof Stripe.errors.StripeError ? 'StripeError' : e.constructor.name,
      class: e.constructor.name, code: e.code, status: e.statusCode, requests: sent() };
  }
}

function expect(o, want) {
  const ok = Object.entries(want).every(([k, v]) => o[k] === v);
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${format} ${o.label}: ${JSON.stringify(o)}${ok ? '' : ' want ' + JSON.stringify(want)}`);
  if (!ok) failed = true;
}

(async () => {
  const first = await outcome('first charge', 'k1', { amount: 100, currency: 'usd' });
  const replay = await outcome('same key, same request (replay)', 'k1', { amount: 100, currency: 'usd' });
  const reused = await outcome('same key, another amount (422 key-reused)', 'k1', { amount: 200, currency: 'usd' });
  const held = await outcome('answer lost (502 outcome-unknown, key held)', 'k2', { amount: 100, currency: 'usd', description: 'die' });
  const heldAgain = await outcome('retry of the held key', 'k2', { amount: 100, currency: 'usd', description: 'die' });
  // Two at once with one key: the second finds the first in flight (409)
  // and, told a retry may help, retries.
  const slow = outcome('slow first', 'k3', { amount: 100, currency: 'usd', description: 'slow' });
  await new Promise((r) => setTimeout(r, 300));
  const concurrent = await outcome('concurrent duplicate (409 in-flight, retryable)', 'k3', { amount: 100, currency: 'usd', description: 'slow' });
  const slowDone = await slow;
  if (format !== 'stripe') {
    for (const o of [first, replay, reused, held, heldAgain, slowDone, concurrent]) console.log(`info ${format} ${o.label}: ${JSON.stringify(o)}`);
    return;
  }
  expect(first, { result: 'ch_1' });
  expect(replay, { result: 'ch_1', requests: 1 });
  expect(reused, { error: 'StripeError', status: 422, code: 'key_reused', requests: 1 });
  expect(held, { error: 'StripeError', status: 502, code: 'outcome_unknown', requests: 1 });
  expect(heldAgain, { error: 'StripeError', status: 502, code: 'outcome_unknown', requests: 1 });
  expect(slowDone, { result: slowDone.result && slowDone.result.startsWith('ch_') ? slowDone.result : 'a charge' });
  // Told a retry may help (Stripe-Should-Retry: true), the SDK retries:
  // it ends with the replay, or, when the first outlasts its retries, with
  // the in-flight refusal as an exception after more than one request.
  if (concurrent.result !== undefined) expect(concurrent, { result: slowDone.result });
  else expect({ ...concurrent, retried: concurrent.requests > 1 }, { error: 'StripeError', status: 409, code: 'in_flight', retried: true });
})().then(() => process.exit(failed ? 1 : 0), (e) => { console.error(e); process.exit(2); });
