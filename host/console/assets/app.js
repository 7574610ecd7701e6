// cyrnel console: a small client of the public HTTP API. Pages are
// functions of the hash route that render into <main> and return a cleanup
// (stop polling, abort streams) run when the route changes.
"use strict";

const KEY = "cyrnel.apiKey";
const $ = (sel, root = document) => root.querySelector(sel);

// h builds an element: h("a", {href: "#"}, "text", child…). Text is always
// set as text, never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// ---- the API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, problem) {
    const details = (problem.errors || []).map((e) => `${e.location || ""}: ${e.message}`).join("; ");
    // A 403 is this key's roles, not a fault: say so first.
    const lead = status === 403 ? "Not allowed with this key" : problem.title || status;
    super(`${lead}${problem.detail ? ": " + problem.detail : ""}${details ? " (" + details + ")" : ""}`);
    this.status = status;
  }
}

function headers(extra) {
  const hs = Object.assign({}, extra);
  const key = sessionStorage.getItem(KEY);
  if (key) hs.Authorization = "Bearer " + key;
  return hs;
}

let keyPrompt = null;

// request calls the API; a 401 asks for the key and retries, until the key
// is right or the person gives up (Escape), which leaves the 401.
async function request(method, path, body, opts = {}) {
  const init = { method, headers: headers(opts.headers), signal: opts.signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 401 && await askKey(sessionStorage.getItem(KEY) ? "The key was refused: enter the right one." : "This server asks for its API key.")) {
    return request(method, path, body, opts);
  }
  if (opts.raw) return resp;
  if (!resp.ok) {
    let problem = {};
    try { problem = await resp.json(); } catch { /* not a problem document */ }
    throw new APIError(resp.status, problem);
  }
  if (resp.status === 204) return null;
  const type = resp.headers.get("Content-Type") || "";
  return type.includes("json") ? resp.json() : resp.text();
}

const api = {
  get: (p, o) => request("GET", p, undefined, o),
  // An action that takes no body (kill, refresh, approve) sends none: the
  // API refuses a body where its document takes none (415).
  post: (p, b, o) => request("POST", p, b, o),
  put: (p, b) => request("PUT", p, b),
  patch: (p, b) => request("PATCH", p, b),
  del: (p) => request("DELETE", p),
};

// exists reports whether a route answers (not 404): sections for APIs that
// other parts of the host may or may not have show only then (and not
// while the key is missing: there is nothing to show).
async function exists(path) {
  const resp = await request("GET", path, undefined, { raw: true });
  return [401, 403, 404, 405].includes(resp.status) ? null : resp;
}

// roles is what the key in use may do, learned by asking one route of each
// role (403: not this role). Elements marked data-needs="admin" (or runner,
// approver) are hidden by the stylesheet unless <body> has the role's class;
// pages skip the calls their key may not make.
let roles = null;

function can(role) {
  return !!roles && (roles.admin || roles[role]);
}

async function learnRoles() {
  const probe = async (path) => {
    const resp = await request("GET", path, undefined, { raw: true });
    return resp.ok || resp.status === 404;
  };
  const [admin, approver, runner] = await Promise.all([probe("/keys?limit=1"), probe("/approvals?limit=1"), probe("/environment")]);
  roles = { admin, approver, runner };
  const names = Object.keys(roles).filter((r) => roles[r]);
  for (const r of ["admin", "approver", "runner"]) document.body.classList.toggle("role-" + r, roles[r]);
  $("#key-button").textContent = names.length ? `API key (${names.join(", ")})` : "API key";
  $("#nav-approvals").hidden = !can("approver");
}

function askKey(why) {
  if (keyPrompt) return keyPrompt;
  const dialog = $("#key-dialog");
  $("#key-why").textContent = why;
  $("#key-input").value = "";
  keyPrompt = new Promise((resolve) => {
    // Escape gives up: the request then fails with its 401.
    dialog.oncancel = () => { keyPrompt = null; resolve(false); };
    const form = $("#key-form");
    form.onsubmit = (ev) => {
      ev.preventDefault();
      const key = $("#key-input").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      dialog.close();
      keyPrompt = null;
      resolve(true);
    };
  });
  if (!dialog.open) dialog.showModal();
  return keyPrompt;
}

// stream follows GET path as Server-Sent Events through fetch (EventSource
// cannot send the Authorization header, and the key never goes in a URL).
async function stream(path, onEvent, signal) {
  const resp = await request("GET", path, undefined, { raw: true, signal, headers: { Accept: "text/event-stream" } });
  if (!resp.ok) throw new APIError(resp.status, await resp.json().catch(() => ({})));
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", type = "message", data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) onEvent(type, JSON.parse(data.join("\n")));
        type = "message";
        data = [];
      } else if (line.startsWith("event:")) type = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
  }
}

// ---- small views -----------------------------------------------------------

// notice tells the result of an action. With at (the button or form the
// person used) it shows right after it and is scrolled into view: the
// person is looking there, not at the top of a long page. Without, it shows
// in the bar under the menu.
function notice(text, kind = "info", at) {
  const n = at ? feedbackAt(at) : $("#notice");
  n.className = (at ? "feedback " : "") + kind;
  n.textContent = text;
  if (at) n.scrollIntoView({ block: "nearest" });
  if (kind !== "error") setTimeout(() => { if (n.textContent === text) n.textContent = ""; }, at ? 8000 : 4000);
}

// feedbackAt is the status line of a control: at the end of a form, or
// right after a button or switch; made once and reused.
function feedbackAt(at) {
  // A button in a row of actions gets its line under the row; a switch in
  // a label, after the label.
  if (at.parentElement && (at.parentElement.classList.contains("actions") || at.parentElement.tagName === "LABEL")) at = at.parentElement;
  const form = at.tagName === "FORM";
  const next = form ? at.lastElementChild : at.nextElementSibling;
  if (next && next.classList.contains("feedback")) return next;
  const el = h("span", { class: "feedback", role: "status" });
  if (form) at.append(el);
  else at.after(el);
  return el;
}

// guard runs an action, showing its error (next to at, when given)
// instead of throwing.
async function guard(fn, at) {
  try { return await fn(); } catch (err) {
    if (err.name !== "AbortError") notice(err.message, "error", at);
  }
}

function when(t) {
  return t ? new Date(t).toLocaleString() : "—";
}

function badge(text, cls) {
  return h("span", { class: "badge " + (cls || text || "none") }, text || "—");
}

// tree renders a JSON value as nested, collapsible lists.
function tree(value, name) {
  const label = name === undefined ? null : h("span", { class: "key" }, name + ": ");
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const summary = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    return h("details", { open: entries.length <= 20 },
      h("summary", {}, label, h("span", { class: "muted" }, summary)),
      h("ul", { class: "tree" }, entries.map(([k, v]) => h("li", {}, tree(v, k)))));
  }
  return h("span", {}, label, h("span", { class: "value " + typeof value }, JSON.stringify(value)));
}

// markdown renders a small, safe subset (headings, lists, tables, code, bold):
// every piece of text goes in as text, so HTML in a tool's docs stays text.
function markdown(src) {
  const out = h("div", { class: "markdown" });
  const lines = src.split("\n");
  let list = null, para = [];
  const inline = (text) => {
    const el = h("span");
    for (const part of text.split(/(`[^`]+`|\*\*[^*]+\*\*)/)) {
      if (part.startsWith("`") && part.endsWith("`") && part.length > 1) el.append(h("code", {}, part.slice(1, -1)));
      else if (part.startsWith("**") && part.endsWith("**") && part.length > 3) el.append(h("strong", {}, part.slice(2, -2)));
      else el.append(part);
    }
    return el;
  };
  const flush = () => {
    if (para.length) out.append(h("p", {}, inline(para.join(" "))));
    para = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith("```")) {
      flush();
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      out.append(h("pre", {}, h("code", {}, code.join("\n"))));
      continue;
    }
    if (line.trim().startsWith("|")) {
      flush();
      const rows = [];
      for (; i < lines.length && lines[i].trim().startsWith("|"); i++) rows.push(lines[i]);
      i--;
      const cells = (row) => row.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
      const body = rows.filter((r) => !/^\s*\|[\s:|-]*\|\s*$/.test(r)).map(cells);
      out.append(h("div", { class: "scroll" }, h("table", {},
        h("thead", {}, h("tr", {}, (body[0] || []).map((c) => h("th", { scope: "col" }, inline(c))))),
        h("tbody", {}, body.slice(1).map((r) => h("tr", {}, r.map((c) => h("td", {}, inline(c)))))))));
      continue;
    }
    const head = /^(#{1,6})\s+(.*)$/.exec(line);
    const item = /^\s*(?:[-*]|\d+\.)\s+(.*)$/.exec(line);
    if (head) {
      flush();
      out.append(h("h" + Math.min(head[1].length + 2, 6), {}, inline(head[2])));
    } else if (item) {
      if (para.length) flush();
      if (!list) { list = h("ul"); out.append(list); }
      list.append(h("li", {}, inline(item[1])));
    } else if (line.trim() === "") flush();
    else para.push(line.trim());
  }
  flush();
  return out;
}

// adminOnly marks el as shown to admin keys only.
function adminOnly(el) {
  el.dataset.needs = "admin";
  return el;
}

function section(title, ...children) {
  const id = "s-" + title.toLowerCase().replace(/[^a-z]+/g, "-");
  return h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...children);
}

function labelled(text, control) {
  const id = control.id || (control.id = "f-" + Math.random().toString(36).slice(2, 9));
  return h("div", { class: "field" }, h("label", { for: id }, text), control);
}

function select(name, options, value) {
  return h("select", { name }, options.map(([v, t]) => h("option", { value: v, selected: v === value }, t)));
}

// code editor: a monospace textarea where Tab indents (Escape, then Tab,
// leaves it, so keyboard users are not trapped).
function editor(value, label) {
  const ta = h("textarea", { class: "code", rows: 12, spellcheck: "false", "aria-label": label, "aria-describedby": "editor-hint" });
  ta.value = value || "";
  let escaped = false;
  ta.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") { escaped = true; return; }
    if (ev.key === "Tab" && !ev.shiftKey && !escaped) {
      ev.preventDefault();
      ta.setRangeText("    ", ta.selectionStart, ta.selectionEnd, "end");
    }
    if (ev.key !== "Escape") escaped = false;
  });
  return ta;
}

function encodePath(p) {
  return p.split("/").map(encodeURIComponent).join("/");
}

async function download(path, name) {
  await guard(async () => {
    const resp = await request("GET", path, undefined, { raw: true });
    if (!resp.ok) throw new APIError(resp.status, await resp.json().catch(() => ({})));
    const url = URL.createObjectURL(await resp.blob());
    h("a", { href: url, download: name.split("/").pop() }).click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  });
}

// ---- routing ---------------------------------------------------------------

// routes maps a hash path to its page and menu entry; each page script
// (processes.js, sessions.js, …) adds its own, in the order index.html
// loads them, before DOMContentLoaded routes the first time.
const routes = [];

let cleanup = null;

function route() {
  if (cleanup) cleanup();
  cleanup = null;
  const [path, query] = (location.hash.slice(1) || "/processes").split("?");
  const main = $("#main");
  main.replaceChildren();
  for (const [re, page, nav] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    for (const a of document.querySelectorAll("nav a[data-page]")) {
      if (a.dataset.page === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = `${nav[0].toUpperCase() + nav.slice(1)} · cyrnel`;
    cleanup = page(main, new URLSearchParams(query || ""), ...m.slice(1).map(decodeURIComponent)) || null;
    return;
  }
  main.append(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/processes" }, "Processes")));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  $("#key-button").addEventListener("click", () => askKey("Enter an API key.").then((ok) => ok && learnRoles().then(route)));
  $("#key-forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); $("#key-input").value = ""; notice("Key forgotten."); });
  // Pages render once the key's roles are known; the approvals entry of
  // the menu shows for keys that may decide them.
  learnRoles().catch(() => {}).finally(() => { $("#nav-approvals").dataset.checked = "true"; route(); });
});
