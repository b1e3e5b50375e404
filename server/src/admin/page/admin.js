// The sluicegate admin page: plain DOM, no framework, no inline script (the
// page's CSP forbids it). The token lives in sessionStorage (this tab only)
// and goes in the Authorization header; no cookie carries it.
"use strict";

const API = "/admin/v1";
const HISTORY = 60; // samples kept per rule for the chart (one per second)
const $ = (sel) => document.querySelector(sel);
const state = { token: sessionStorage.getItem("sluicegate-token") || "", domain: null, rules: [], last: null, history: {}, timer: null, editing: null };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function api(method, path, { body, version, contentType } = {}) {
  const headers = { Authorization: "Bearer " + state.token };
  if (body !== undefined) headers["Content-Type"] = contentType || "application/json";
  if (version !== undefined) headers["If-Match"] = '"' + version + '"';
  const resp = await fetch(API + path, { method, headers, body: body === undefined ? undefined : (typeof body === "string" ? body : JSON.stringify(body)), credentials: "omit", cache: "no-store" });
  let data = null;
  if (resp.status !== 204) { try { data = await resp.json(); } catch (e) { data = null; } }
  if (resp.status === 401) { logout("The token was refused (401)."); }
  return { status: resp.status, data };
}

function errorText(r) {
  const errs = (r.data && r.data.errors) || [];
  return "HTTP " + r.status + (errs.length ? ": " + errs.map((e) => (e.field ? e.field + ": " : "") + e.message).join("; ") : "");
}

function showError(msg) { $("#error").textContent = msg || ""; }

async function login() {
  state.token = $("#token").value.trim() || state.token;
  if (!state.token) return;
  const r = await api("GET", "/domains");
  if (r.status !== 200) { $("#login-error").textContent = "Sign-in failed: " + errorText(r); state.token = ""; return; }
  sessionStorage.setItem("sluicegate-token", state.token);
  $("#token").value = "";
  $("#login-error").textContent = "";
  $("#login-view").hidden = true;
  $("#main-view").hidden = false;
  $("#logout").hidden = false;
  renderDomains(r.data.domains);
}

function logout(msg) {
  state.token = "";
  sessionStorage.removeItem("sluicegate-token");
  clearInterval(state.timer);
  $("#main-view").hidden = true;
  $("#logout").hidden = true;
  $("#login-view").hidden = false;
  $("#login-error").textContent = msg || "";
}

function renderDomains(domains) {
  const ul = $("#domains");
  ul.replaceChildren(...domains.map((d) => {
    const b = el("button", { type: "button", "data-domain": d.name, class: d.name === state.domain ? "current" : "" }, d.name + (d.served ? "" : " (not served here yet)"));
    b.addEventListener("click", () => openDomain(d.name));
    return el("li", {}, b);
  }));
}

async function refreshDomains() {
  const r = await api("GET", "/domains");
  if (r.status === 200) renderDomains(r.data.domains);
}

async function openDomain(name) {
  if (!name) return;
  state.domain = name;
  state.last = null;
  state.history = {};
  $("#domain-title").textContent = name;
  $("#domain-view").hidden = false;
  $("#editor").hidden = true;
  await refreshDomains();
  await loadRules();
  await loadAudit();
  clearInterval(state.timer);
  state.timer = setInterval(pollStats, 1000);
  pollStats();
}

async function loadRules() {
  const r = await api("GET", "/domains/" + encodeURIComponent(state.domain) + "/rules");
  state.rules = r.status === 200 ? r.data.rules : [];
  if (r.status !== 200 && r.status !== 404) showError(errorText(r)); else showError("");
  renderRules();
}

function renderRules() {
  const tbody = $("#rules tbody");
  tbody.replaceChildren(...state.rules.map((rule) => {
    const canvas = el("canvas", { width: 180, height: 36, class: "chart" });
    const toggle = el("button", { type: "button", class: "toggle-mode" }, rule.mode === "shadow" ? "Enforce" : "Shadow");
    toggle.addEventListener("click", () => switchMode(rule));
    const edit = el("button", { type: "button", class: "edit" }, "Edit");
    edit.addEventListener("click", () => openEditor(rule));
    const del = el("button", { type: "button", class: "delete" }, "Delete");
    del.addEventListener("click", () => deleteRule(rule));
    return el("tr", { "data-rule": rule.name },
      el("td", {}, rule.name),
      el("td", {}, rule.match ? JSON.stringify(rule.match) : "(every request)"),
      el("td", {}, (rule.key || []).join(", ")),
      el("td", { class: "limit" }, rule.limit || ""),
      el("td", { class: "mode" }, rule.mode || "(default)"),
      el("td", { class: "num" }, rule.version),
      el("td", { class: "num rate-allowed" }, "–"),
      el("td", { class: "num rate-denied" }, "–"),
      el("td", { class: "num rate-shadow" }, "–"),
      el("td", {}, canvas),
      el("td", {}, edit, toggle, del));
  }));
}

async function pollStats() {
  if (!state.domain || !state.token) return;
  const r = await api("GET", "/domains/" + encodeURIComponent(state.domain) + "/stats");
  if (r.status !== 200) return;
  const s = r.data;
  $("#process").textContent = "pid " + s.pid + ", since " + s.started_at;
  const prev = state.last;
  state.last = s;
  if (!prev) return;
  const dt = Math.max((s.at_ms - prev.at_ms) / 1000, 0.001);
  for (const rule of s.rules) {
    const before = prev.rules.find((p) => p.name === rule.name) || { allowed: rule.allowed, denied: rule.denied, shadow_denied: rule.shadow_denied };
    const rate = [(rule.allowed - before.allowed) / dt, (rule.denied - before.denied) / dt, (rule.shadow_denied - before.shadow_denied) / dt].map((x) => Math.max(0, x));
    const h = (state.history[rule.name] = state.history[rule.name] || []);
    h.push(rate);
    if (h.length > HISTORY) h.shift();
    const row = document.querySelector('#rules tr[data-rule="' + CSS.escape(rule.name) + '"]');
    if (!row) continue;
    row.querySelector(".rate-allowed").textContent = rate[0].toFixed(1);
    row.querySelector(".rate-denied").textContent = rate[1].toFixed(1);
    row.querySelector(".rate-shadow").textContent = rate[2].toFixed(1);
    draw(row.querySelector("canvas"), h);
  }
}

function draw(canvas, history) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  const max = Math.max(1, ...history.flat());
  const colours = ["#28a745", "#d73a49", "#f9a825"];
  colours.forEach((colour, i) => {
    ctx.strokeStyle = colour;
    ctx.beginPath();
    // The newest sample at the right edge, one second a step.
    const offset = HISTORY - history.length;
    history.forEach((rates, x) => {
      const px = ((x + offset) / (HISTORY - 1)) * w, py = h - 1 - (rates[i] / max) * (h - 2);
      if (x === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
    });
    ctx.stroke();
  });
}

function clearFieldErrors() { document.querySelectorAll(".field-error").forEach((e) => { e.textContent = ""; }); }

function showFieldErrors(r) {
  clearFieldErrors();
  for (const e of (r.data && r.data.errors) || []) {
    const field = (e.field || "").split(".")[0];
    const slot = document.querySelector('.field-error[data-field="' + CSS.escape(field) + '"]') || document.querySelector('.field-error[data-field=""]');
    slot.textContent = (slot.textContent ? slot.textContent + " " : "") + e.message;
  }
}

function openEditor(rule) {
  state.editing = rule || null;
  clearFieldErrors();
  $("#editor-title").textContent = rule ? "Edit rule " + rule.name + " (version " + rule.version + ")" : "New rule";
  $("#f-name").value = rule ? rule.name : "";
  $("#f-name").disabled = !!rule;
  $("#f-limit").value = rule ? rule.limit || "" : "";
  $("#f-match").value = rule && rule.match ? JSON.stringify(rule.match) : "";
  $("#f-key").value = rule && rule.key ? rule.key.join(", ") : "";
  $("#f-algorithm").value = rule ? rule.algorithm || "" : "";
  $("#f-mode").value = rule ? rule.mode || "" : "";
  $("#editor-status").textContent = "";
  $("#editor").hidden = false;
}

// The rule the form describes, or null (and the field's error shown).
function formRule() {
  const rule = Object.assign({}, state.editing || {});
  for (const k of ["version", "created_at", "updated_at", "updated_by", "position"]) delete rule[k];
  rule.name = $("#f-name").value.trim();
  const set = (k, v) => { if (v) rule[k] = v; else delete rule[k]; };
  set("limit", $("#f-limit").value.trim());
  set("algorithm", $("#f-algorithm").value.trim());
  set("mode", $("#f-mode").value);
  const key = $("#f-key").value.split(",").map((s) => s.trim()).filter(Boolean);
  set("key", key.length ? key : null);
  const m = $("#f-match").value.trim();
  if (m) {
    try { rule.match = JSON.parse(m); } catch (e) { showFieldErrors({ data: { errors: [{ field: "match", message: "not JSON: " + e.message }] } }); return null; }
  } else delete rule.match;
  return rule;
}

async function checkRule() {
  clearFieldErrors();
  const rule = formRule();
  if (!rule) return;
  const r = await api("POST", "/domains/" + encodeURIComponent(state.domain) + "/validate", { body: rule });
  if (r.status === 200) $("#editor-status").textContent = "Valid."; else { $("#editor-status").textContent = ""; showFieldErrors(r); }
}

async function saveRule() {
  clearFieldErrors();
  const rule = formRule();
  if (!rule) return;
  if (!rule.name) { showFieldErrors({ data: { errors: [{ field: "name", message: "a rule needs a name" }] } }); return; }
  const path = "/domains/" + encodeURIComponent(state.domain) + "/rules/" + encodeURIComponent(rule.name);
  const r = await api("PUT", path, { body: rule, version: state.editing ? state.editing.version : undefined });
  if (r.status === 200 || r.status === 201) {
    $("#editor").hidden = true;
    $("#editor-status").textContent = "";
    await loadRules();
    await loadAudit();
    await refreshDomains();
  } else if (r.status === 412 || r.status === 428) {
    $("#editor-status").textContent = "Someone changed this rule meanwhile: " + errorText(r) + " Reload it and edit again.";
  } else {
    showFieldErrors(r);
  }
}

async function switchMode(rule) {
  const next = Object.assign({}, rule, { mode: rule.mode === "shadow" ? "enforce" : "shadow" });
  for (const k of ["version", "created_at", "updated_at", "updated_by"]) delete next[k];
  const r = await api("PUT", "/domains/" + encodeURIComponent(state.domain) + "/rules/" + encodeURIComponent(rule.name), { body: next, version: rule.version });
  if (r.status !== 200) showError("Switching " + rule.name + ": " + errorText(r)); else showError("");
  await loadRules();
  await loadAudit();
}

async function deleteRule(rule) {
  if (!window.confirm("Delete rule " + rule.name + "?")) return;
  const r = await api("DELETE", "/domains/" + encodeURIComponent(state.domain) + "/rules/" + encodeURIComponent(rule.name), { version: rule.version });
  if (r.status !== 204) showError("Deleting " + rule.name + ": " + errorText(r)); else showError("");
  await loadRules();
  await loadAudit();
}

function describe(entry) {
  const show = (rec) => (rec ? (rec.limit !== undefined ? rec.limit + (rec.mode ? " " + rec.mode : "") + " v" + rec.version : "settings v" + rec.version) : "–");
  return show(entry.before) + " → " + show(entry.after);
}

async function loadAudit() {
  // Pages are oldest first: read to the end (bounded), show the latest 50.
  let after = null, entries = [];
  for (let i = 0; i < 50; i++) {
    const q = "?domain=" + encodeURIComponent(state.domain) + "&limit=1000" + (after ? "&after=" + encodeURIComponent(after) : "");
    const r = await api("GET", "/audit" + q);
    if (r.status !== 200) break;
    entries = entries.concat(r.data.entries).slice(-50);
    after = r.data.next;
    if (!after) break;
  }
  $("#audit tbody").replaceChildren(...entries.reverse().map((e) => el("tr", { "data-action": e.action }, el("td", {}, e.at), el("td", {}, e.by), el("td", {}, e.action), el("td", {}, e.rule || "(settings)"), el("td", {}, describe(e)))));
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login").addEventListener("click", login);
  $("#token").addEventListener("keydown", (e) => { if (e.key === "Enter") login(); });
  $("#logout").addEventListener("click", () => logout(""));
  $("#open-domain").addEventListener("click", () => openDomain($("#domain-name").value.trim()));
  $("#new-rule").addEventListener("click", () => openEditor(null));
  $("#save").addEventListener("click", saveRule);
  $("#check").addEventListener("click", checkRule);
  $("#cancel").addEventListener("click", () => { $("#editor").hidden = true; });
  if (state.token) login();
});
