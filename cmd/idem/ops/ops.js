// The operations page of idem proxy: lists held and in-flight keys through
// the JSON API beside it, shows one record, and resolves a held key after
// a confirmation step.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null; // the record shown, as the API returned it

function token() { return $("token").value.trim(); }

function message(text, error) {
  $("message").textContent = text;
  $("message").className = error ? "error" : "";
}

async function api(path, options) {
  const resp = await fetch(path, options);
  const data = await resp.json().catch(() => ({ error: "answer " + resp.status + " is not JSON" }));
  if (!resp.ok) throw new Error(data.error || ("HTTP " + resp.status));
  return data;
}

function age(sec) {
  if (sec >= 3600) return Math.floor(sec / 3600) + "h" + String(Math.floor(sec / 60) % 60).padStart(2, "0") + "m";
  if (sec >= 60) return Math.floor(sec / 60) + "m" + String(Math.floor(sec) % 60).padStart(2, "0") + "s";
  return sec.toFixed(1) + "s";
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

async function refresh() {
  const q = new URLSearchParams({ state: $("state").value });
  for (const [id, name] of [["min-age", "min_age"], ["request", "request"], ["scope", "scope"]]) {
    if ($(id).value.trim() !== "") q.set(name, $(id).value.trim());
  }
  try {
    const data = await api("/ops/api/keys?" + q);
    $("mode").textContent = data.writable
      ? "Resolving needs the admin token."
      : "Read-only: the proxy runs without an admin token (--admin-token).";
    const body = $("keys").tBodies[0];
    body.replaceChildren();
    for (const k of data.keys) {
      const row = body.insertRow();
      row.dataset.digest = k.digest;
      row.className = k.state;
      cell(row, k.digest.slice(0, 16), "digest");
      cell(row, k.state + (k.lease_expired ? " (lease expired)" : ""), "state");
      cell(row, age(k.age_seconds), "age");
      cell(row, k.scope_digest || "-", "scope");
      cell(row, k.request || "-", "request");
      cell(row, k.step ? "held in step " + k.step : "-", "step");
      cell(row, String(k.fence), "fence");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = "Open";
      open.addEventListener("click", () => show(k.digest));
      row.insertCell().append(open);
    }
    $("list-status").textContent = data.count + " keys";
  } catch (e) {
    $("list-status").textContent = "Listing failed: " + e.message;
  }
}

function describe(r) {
  const lines = [
    "state:        " + r.state + (r.lease_expired ? " (lease expired)" : ""),
    "fence:        " + r.fence,
    "age:          " + age(r.age_seconds),
    "created:      " + r.created_at,
    "expires:      " + r.expires_at,
    "started:      " + r.started,
  ];
  if (r.request) lines.push("request:      " + r.request);
  if (r.scope_digest) lines.push("scope digest: " + r.scope_digest);
  if (r.step) lines.push("held in step: " + r.step);
  if (r.steps_finished) lines.push("steps done:   " + r.steps_finished.join(", "));
  if (r.response) {
    const p = r.response;
    lines.push("", "HTTP " + p.status + (p.outcome_unknown ? " (outcome unknown)" : ""));
    for (const [k, vs] of Object.entries(p.headers || {}).sort()) for (const v of vs) lines.push(k + ": " + v);
    lines.push("", p.binary ? "(binary body, " + p.body_bytes + " bytes)" : (p.body || ""));
  } else if (r.result) {
    lines.push("", r.result);
  }
  return lines.join("\n");
}

async function show(digest) {
  try {
    current = await api("/ops/api/keys/" + encodeURIComponent(digest));
  } catch (e) {
    message("Opening " + digest.slice(0, 16) + " failed: " + e.message, true);
    return;
  }
  $("detail").hidden = false;
  $("detail-digest").textContent = current.digest;
  $("detail-record").textContent = describe(current);
  $("resolve-form").hidden = current.state !== "held";
  $("confirm-box").hidden = true;
  const doKey = current.kind === "do";
  $("status").disabled = doKey;
  $("headers").disabled = doKey;
  message("");
}

function release() { return $("mode-release").checked; }

function askConfirm() {
  if (!current) return;
  const key = "held key " + current.digest.slice(0, 16) + " (fence " + current.fence + (current.step ? ", held in step " + current.step : "") + ")";
  const what = release()
    ? "Release " + key + ": the next retry runs " + (current.step ? "the step" : "the request") + " again. Only do this if it did not happen."
    : "Replace " + key + " with " + (current.kind === "do" ? "this result" : "HTTP " + $("status").value) + ": every retry gets this answer.";
  $("confirm-text").textContent = what;
  $("confirm-box").hidden = false;
}

function parseHeaders(text) {
  const h = {};
  for (const line of text.split("\n")) {
    const i = line.indexOf(":");
    if (line.trim() === "") continue;
    if (i <= 0) throw new Error("header line without a name: " + line);
    const name = line.slice(0, i).trim();
    (h[name] = h[name] || []).push(line.slice(i + 1).trim());
  }
  return h;
}

async function confirmResolve() {
  if (!current) return;
  let req;
  try {
    req = release() ? { fence: current.fence, release: true }
      : current.kind === "do" ? { fence: current.fence, body: $("body").value }
      : { fence: current.fence, status: Number($("status").value), headers: parseHeaders($("headers").value), body: $("body").value };
  } catch (e) {
    message(e.message, true);
    return;
  }
  if (current.step) req.step = current.step; // the step looked at: refused if the key is held elsewhere now
  try {
    const data = await api("/ops/api/keys/" + current.digest + "/resolve", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token() },
      body: JSON.stringify(req),
    });
    $("confirm-box").hidden = true;
    const digest = current.digest;
    await show(digest);
    await refresh();
    message((data.released ? "Released " : "Resolved ") + digest.slice(0, 16) + ": now " + (data.result ? data.result.state : "gone") + ".");
  } catch (e) {
    $("confirm-box").hidden = true;
    message("Not resolved: " + e.message, true);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = sessionStorage.getItem("idem-admin-token") || "";
  $("token").addEventListener("change", () => sessionStorage.setItem("idem-admin-token", token()));
  $("refresh").addEventListener("click", refresh);
  $("state").addEventListener("change", refresh);
  $("resolve").addEventListener("click", askConfirm);
  $("confirm").addEventListener("click", confirmResolve);
  $("cancel").addEventListener("click", () => { $("confirm-box").hidden = true; });
  for (const id of ["mode-result", "mode-release"]) {
    $(id).addEventListener("change", () => { $("result-fields").hidden = release(); });
  }
  refresh();
});
