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

// ---- processes -------------------------------------------------------------

const STATES = ["", "idle", "queued", "running", "suspended", "terminating"];
const EXITS = ["", "success", "failed", "timeout", "canceled"];

function pageProcesses(main, params) {
  const state = select("state", STATES.map((s) => [s, s || "any"]), params.get("state") || "");
  const exit = select("exitState", EXITS.map((s) => [s, s || "any"]), params.get("exitState") || "");
  const ref = h("input", { name: "ref", type: "search", placeholder: "exact ref" });
  ref.value = params.get("ref") || "";
  const body = h("tbody");
  const more = h("p", { class: "muted" });
  main.append(h("h1", {}, "Processes"),
    h("form", { class: "filters", role: "search", "aria-label": "Filter processes", onsubmit: (e) => e.preventDefault() },
      labelled("State", state), labelled("Exit state", exit), labelled("Ref", ref)),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Processes" },
      h("thead", {}, h("tr", {}, ["PID", "Ref", "State", "Exit", "Reason", "Created", "Duration"].map((t, i) => h("th", { scope: "col", class: i > 4 ? "wide" : null }, t)))),
      body)), more);
  let timer = null, stopped = false;
  const load = async () => {
    clearTimeout(timer);
    const q = new URLSearchParams({ limit: "50" });
    for (const el of [state, exit, ref]) if (el.value) q.set(el.name, el.value);
    await guard(async () => {
      const list = await api.get("/processes?" + q);
      body.replaceChildren(...list.items.map((p) => h("tr", { "data-pid": p.pid },
        h("td", {}, h("a", { href: "#/processes/" + p.pid }, String(p.pid))),
        h("td", {}, p.ref || ""),
        h("td", {}, badge(p.state)),
        h("td", {}, badge(p.exitState)),
        h("td", {}, p.reason || ""),
        h("td", { class: "wide" }, when(p.createdAt)),
        h("td", { class: "wide" }, p.durationMs == null ? "" : p.durationMs + " ms"))));
      more.textContent = list.items.length ? (list.hasMore ? "Showing the newest 50." : "") : "No processes match.";
    });
    if (!stopped) timer = setTimeout(load, 1500);
  };
  for (const el of [state, exit, ref]) el.addEventListener("input", () => {
    const q = new URLSearchParams();
    for (const e of [state, exit, ref]) if (e.value) q.set(e.name, e.value);
    history.replaceState(null, "", "#/processes" + (q.toString() ? "?" + q : ""));
    load();
  });
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

// extras are the process sections that show only when their API answers;
// each fills its section from the route's JSON.
const extras = [
  { title: "Displays", path: "displays", fill: (sec, data) => sec.append(...(data.items || []).map(display)) },
  { title: "Files", path: "files", fill: (sec, data, pid) => sec.append(h("ul", {}, (data.items || []).map((f) =>
      h("li", {}, h("button", { type: "button", class: "linklike", onclick: () => download(`/processes/${pid}/files/${encodePath(f.path)}`, f.path) }, f.path),
        h("span", { class: "muted" }, ` ${f.size} bytes`))))) },
  { title: "Tool calls", path: "tool-calls", fill: (sec, data) => sec.append(h("div", { class: "scroll" }, h("table", { "aria-label": "Tool calls" },
      h("thead", {}, h("tr", {}, ["At", "Tool", "Policy", "Outcome", "Duration", "Parameters"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, (data.items || []).map((c) => h("tr", {},
        h("td", {}, when(c.at)), h("td", {}, `${c.serviceId}.${c.toolId}`), h("td", {}, c.policy || ""),
        h("td", {}, badge(c.outcome)), h("td", {}, c.durationMs + " ms"), h("td", {}, tree(c.parameters)))))))) },
];

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

// display renders one MIME bundle: an image, the tables of an HTML
// rendering (a DataFrame's, shown as its text until they are read), JSON,
// or text.
function display(d) {
  const data = d.data || {};
  const img = Object.keys(data).find((m) => /^image\/(png|jpeg|gif|webp)$/.test(m));
  let body;
  if (img) body = h("img", { src: `data:${img};base64,${data[img]}`, alt: data["text/plain"] || `display ${d.index}` });
  else if (data["application/json"] !== undefined) body = tree(data["application/json"]);
  else body = h("pre", {}, data["text/plain"] ?? JSON.stringify(data));
  const fig = h("figure", { class: "display" }, body, h("figcaption", { class: "muted" }, `${d.kind || "display"} ${d.index ?? ""}`));
  if (!img && typeof data["text/html"] === "string") {
    htmlTables(data["text/html"]).then((tables) => { if (tables.length) body.replaceWith(h("div", { class: "scroll" }, tables)); });
  }
  return fig;
}

// The table reader is a sandboxed frame (assets/tables.js) that parses
// program-made HTML under its own CSP and answers with cell text; one frame
// serves the tab, each question waits for its numbered answer.
let tableReader = null;
const tableAnswers = new Map();
let tableQuestions = 0;

function readTables(html) {
  if (!tableReader) {
    const frame = h("iframe", { src: "/console/tables.html", sandbox: "allow-scripts", hidden: true, title: "HTML table reader" });
    tableReader = new Promise((ok) => frame.addEventListener("load", () => ok(frame), { once: true }));
    window.addEventListener("message", (ev) => {
      if (ev.source !== frame.contentWindow || !ev.data) return;
      const answer = tableAnswers.get(ev.data.id);
      tableAnswers.delete(ev.data.id);
      if (answer) answer(Array.isArray(ev.data.tables) ? ev.data.tables : []);
    });
    document.body.append(frame);
  }
  return tableReader.then((frame) => new Promise((ok) => {
    const id = ++tableQuestions;
    tableAnswers.set(id, ok);
    frame.contentWindow.postMessage({ id, html }, "*");
  }));
}

// htmlTables rebuilds the tables of program-made HTML from their cells'
// text alone: the reader parses it inert (no scripts run, nothing loads)
// and nothing else of it reaches the page.
async function htmlTables(html) {
  const span = (n) => (Number(n) > 1 ? String(Math.min(Number(n), 1000)) : null);
  return (await readTables(html)).slice(0, 10).map((rows) => h("table", { class: "data" },
    rows.slice(0, 500).map((r) => h("tr", {}, r.map((c) =>
      h(c.th ? "th" : "td", { colspan: span(c.colspan), rowspan: span(c.rowspan) }, String(c.text)))))));
}

// processView shows one process and follows it live; used by the process
// page and under the Run editor. It returns a cleanup.
function processView(root, pid) {
  let ctl = new AbortController(), stopped = false;
  const meta = h("dl", { class: "meta" });
  const code = h("pre", { class: "code", "aria-label": "Code" });
  const stdout = h("pre", { class: "stream", id: "stdout", "aria-label": "stdout", "aria-live": "off" });
  const stderr = h("pre", { class: "stream err", id: "stderr", "aria-label": "stderr" });
  const output = h("div", { class: "output", id: "output" });
  let out = {};
  const kill = h("button", { type: "button", "data-needs": "runner", id: "kill", onclick: (ev) => act("kill", ev.currentTarget) }, "Kill");
  const rerun = h("button", { type: "button", "data-needs": "runner", id: "rerun", onclick: (ev) => act("run", ev.currentTarget) }, "Re-run");
  const del = h("button", { type: "button", "data-needs": "runner", id: "delete", class: "danger", onclick: (ev) => act("delete", ev.currentTarget) }, "Delete");
  const extraBox = h("div");
  root.append(h("div", { class: "actions", role: "group", "aria-label": "Process actions" }, kill, rerun, del), meta,
    section("Code", code), section("stdout", stdout), section("stderr", stderr), section("Output", output), extraBox);

  const show = (p) => {
    const rows = [["State", badge(p.state)], ["Exit", badge(p.exitState)], ["Reason", p.reason || "—"],
      ["Error", p.error || "—"], ["Ref", p.ref || "—"], ["Environment", p.environment || "—"],
      ["Session", p.session ? h("a", { href: "#/sessions/" + encodeURIComponent(p.session) }, p.session) : "—"], ["Host", p.hostId || "—"], ["Runs", p.runs],
      ["Created", when(p.createdAt)], ["Started", when(p.startedAt)], ["Finished", when(p.finishedAt)],
      ["Duration", p.durationMs == null ? "—" : p.durationMs + " ms"], ["Timeout", p.timeoutMs + " ms"]];
    if (p.cpuMs != null) rows.push(["CPU", p.cpuMs + " ms"]);
    if (p.peakMemoryBytes != null) rows.push(["Peak memory", (p.peakMemoryBytes / 1048576).toFixed(1) + " MiB"]);
    if (p.stdoutTruncated || p.stderrTruncated || p.outputTruncated) rows.push(["Truncated", [p.stdoutTruncated && "stdout", p.stderrTruncated && "stderr", p.outputTruncated && "output"].filter(Boolean).join(", ")]);
    meta.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k.toLowerCase() }, v)]));
    setState(p.state);
  };
  const setState = (s) => {
    const dd = meta.querySelector('[data-field="state"]');
    if (dd) dd.replaceChildren(badge(s));
    kill.disabled = s === "idle";
    rerun.disabled = del.disabled = s !== "idle";
  };
  const setOutput = (o) => { out = o || {}; output.replaceChildren(Object.keys(out).length ? tree(out) : h("span", { class: "muted" }, "none")); };
  const extrasLoad = async () => {
    const boxes = [];
    for (const x of extras) {
      const resp = await exists(`/processes/${pid}/${x.path}`).catch(() => null);
      if (!resp || !resp.ok) continue;
      const sec = section(x.title);
      x.fill(sec, await resp.json(), pid);
      boxes.push(sec);
    }
    extraBox.replaceChildren(...boxes);
  };

  const follow = async () => {
    const p = await api.get(`/processes/${pid}`);
    show(p);
    setOutput(p.output);
    code.textContent = await api.get(`/processes/${pid}/code`).catch(() => "");
    stdout.textContent = "";
    stderr.textContent = "";
    extraBox.replaceChildren();
    let live = null; // displays as they arrive; the exit reloads them whole
    try {
      await stream(`/processes/${pid}/events`, (type, ev) => {
        switch (type) {
          case "state": setState(ev.state); break;
          case "stdout": stdout.append(ev.text); break;
          case "stderr": stderr.append(ev.text); break;
          case "output": setOutput(mergePatch(out, ev.patch)); break;
          case "display":
            if (!live) extraBox.append(live = section("Displays"));
            live.append(display(ev));
            break;
          case "exit": show(ev); setOutput(ev.output); stdout.textContent = ev.stdout; stderr.textContent = ev.stderr; break;
        }
      }, ctl.signal);
    } catch (err) {
      // A dropped connection (a restarted server, a network change) is
      // followed again; an API error is shown.
      if (stopped || err.name === "AbortError" || err instanceof APIError) throw err;
      notice(`Lost the event stream (${err.message}); reconnecting.`, "error");
      await new Promise((ok) => setTimeout(ok, 2000));
      if (!stopped) return follow();
      return;
    }
    if (!stopped) await extrasLoad();
  };
  const act = (what, at) => guard(async () => {
    if (what === "delete") {
      if (!confirm(`Delete process ${pid}?`)) return;
      await api.del(`/processes/${pid}`);
      notice(`Process ${pid} deleted.`);
      location.hash = "#/processes";
      return;
    }
    if (what === "kill") {
      // The stream shows what the kill did: this answer can arrive after the
      // stream's exit event, and showing it would undo that.
      await api.post(`/processes/${pid}/kill`);
      notice(`Kill sent to process ${pid}.`, "info", at);
      return;
    }
    ctl.abort();
    ctl = new AbortController();
    await api.post(`/processes/${pid}/run`, { force: true });
    notice(`Process ${pid} runs again.`, "info", at);
    guard(follow);
  }, at);
  guard(follow);
  return () => { stopped = true; ctl.abort(); };
}

// mergePatch applies an output patch: objects merge key by key, null
// removes, anything else replaces.
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const res = target && typeof target === "object" && !Array.isArray(target) ? Object.assign({}, target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete res[k];
    else res[k] = mergePatch(res[k], v);
  }
  return res;
}

function pageProcess(main, params, pid) {
  main.append(h("h1", {}, `Process ${pid}`), h("p", {}, h("a", { href: "#/processes" }, "← all processes")));
  return processView(main, pid);
}

// ---- run -------------------------------------------------------------------

function pageRun(main) {
  const code = editor(sessionStorage.getItem("cyrnel.draft") || "", "Code");
  code.id = "code";
  code.addEventListener("input", () => sessionStorage.setItem("cyrnel.draft", code.value));
  const ref = h("input", { id: "run-ref", type: "text", maxlength: "256" });
  const timeout = h("input", { id: "run-timeout", type: "number", min: "1", placeholder: "30000" });
  const sessionBox = h("div");
  const envLine = h("p", { class: "muted" });
  const result = h("div", { id: "result" });
  let cleanup = null;
  const form = h("form", { "aria-label": "Run code", onsubmit: (ev) => {
    ev.preventDefault();
    guard(async () => {
      const body = { code: code.value };
      if (ref.value) body.ref = ref.value;
      if (timeout.value) body.timeoutMs = Number(timeout.value);
      const ses = sessionBox.querySelector("select");
      if (ses && ses.value) body.session = ses.value;
      const p = await api.post("/processes", body);
      if (cleanup) cleanup();
      result.replaceChildren(h("h2", {}, h("a", { href: "#/processes/" + p.pid }, `Process ${p.pid}`)));
      cleanup = processView(result, p.pid);
      // The run's output grows under the form: bring it into view.
      result.scrollIntoView({ block: "start" });
    }, form);
  } },
  labelled("Code", code),
  h("p", { class: "hint", id: "editor-hint" }, "Tab indents; press Escape, then Tab, to leave the editor."),
  h("div", { class: "row" }, labelled("Ref (optional)", ref), labelled("Timeout in ms (optional)", timeout), sessionBox),
  h("button", { type: "submit", id: "run" }, "Run"));
  const guide = h("details", {}, h("summary", {}, "How to write code for this environment"));
  main.append(h("h1", {}, "Run"), envLine, guide, form, result);
  guard(async () => {
    const env = await api.get("/environment");
    envLine.textContent = env.active ? `Runs in the active environment: ${env.active.module}.` : `No active environment: ${env.error || "none set up"}.`;
    if (env.active) {
      code.placeholder = env.active.module === "python" ? "print('hello')\ncyrnel.output({'answer': 42})" : "console.log('hello')";
      guide.append(markdown(await api.get("/environment/docs")));
    } else guide.hidden = true;
    const resp = await exists("/sessions?state=ready");
    if (resp && resp.ok) {
      const list = await resp.json();
      sessionBox.append(labelled("Session", select("session", [["", "none (a fresh interpreter)"], ...list.items.map((s) => [s.id, `${s.id} (${s.module})`])], "")));
    }
  });
  return () => { if (cleanup) cleanup(); };
}

// ---- environment -----------------------------------------------------------

const yesno = (b, yes, no) => (b ? yes : no);

// sandboxWords turns the environment's sandbox status into sentences: the
// fields are named for the layer ("network": false means programs may NOT
// use the network), which reads backwards when shown raw.
function sandboxWords(sb) {
  if (!sb) return [];
  if (sb.enabled === false) return [["Sandbox", "OFF: programs run with the host's rights"]];
  const l = sb.layers || {};
  const rows = [
    ["Sandbox", "on"],
    ["Network", yesno(l.network, "allowed: programs can reach the host's network", "blocked: programs have no network")],
    ["Namespaces", yesno(l.namespaces, "own processes, mounts and hostname (isolated)", "not isolated: programs see the host's")],
    ["File access (Landlock)", l.landlockAbi ? `restricted (Landlock ABI ${l.landlockAbi})` : "not restricted by Landlock"],
    ["System calls (seccomp)", yesno(l.seccomp, "filtered", "not filtered")],
    ["Memory limit enforced by", l.memory || "—"],
    ["Process limit enforced by", l.procs === "none" ? "nothing (no pids cgroup for root)" : l.procs || "—"],
  ];
  const lim = sb.limits || {};
  const names = { memoryMb: ["Memory", " MiB"], cpuSeconds: ["CPU time", " s"], processes: ["Processes", ""], fileSizeMb: ["File size", " MiB"], openFiles: ["Open files", ""], tmpMb: ["Temporary space", " MiB"] };
  for (const [k, v] of Object.entries(lim)) {
    const [name, unit] = names[k] || [k, ""];
    rows.push([`Limit: ${name}`, `${v}${unit}`]);
  }
  return rows;
}

function envCard(env, title) {
  const st = env.status || {};
  const rows = [["Module", env.module], ["Executions in flight", env.inFlight]];
  if (st.version) rows.push(["Version", st.version]);
  if (st.interpreter) rows.push(["Interpreter", st.interpreter]);
  if (st.mode) rows.push(["Mode", st.mode]);
  if (st.concurrency != null) rows.push(["Concurrency", `${st.running ?? 0} running, ${st.queued ?? 0} queued, at most ${st.concurrency} at once`]);
  const pool = st.pool;
  if (pool) {
    const healthy = !pool.failures;
    rows.push(["Pool", `${pool.ready} of ${pool.size} warm interpreters ready, ${pool.spawning} starting, ${pool.lent} in use`]);
    rows.push(["Pool health", healthy ? `healthy: ${pool.started} started, ${pool.served} served` : `${pool.failures} failures to start (of ${pool.started})`]);
  }
  rows.push(...sandboxWords(st.sandbox));
  const known = new Set(["version", "interpreter", "mode", "concurrency", "running", "queued", "pool", "sandbox"]);
  const rest = Object.fromEntries(Object.entries(st).filter(([k]) => !known.has(k)));
  return section(title, h("dl", { class: "meta" }, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    Object.keys(rest).length ? tree(rest, "more") : null);
}

function pageEnvironment(main) {
  const box = h("div", { id: "env" });
  const choice = h("select", { id: "env-module", name: "module" });
  const form = h("form", { class: "row", "aria-label": "Switch the environment", onsubmit: (ev) => {
    ev.preventDefault();
    guard(async () => {
      const env = await api.put("/environment", { module: choice.value });
      notice(`Switched to ${env.active ? env.active.module : choice.value}.`, "info", form);
      render(env);
    }, form);
  }, "data-needs": "admin" }, labelled("Environment", choice), h("button", { type: "submit", id: "env-switch" }, "Switch"));
  main.append(h("h1", {}, "Environment"), form, box);
  const render = (env) => {
    box.replaceChildren(
      env.active ? envCard(env.active, "Active: " + env.active.module) : section("Active", h("p", { class: "error" }, env.error || "No environment is active.")),
      ...(env.draining || []).map((d) => envCard(d, "Draining: " + d.module)));
    box.dataset.active = env.active ? env.active.module : "";
  };
  let timer = null, stopped = false;
  const load = async () => {
    await guard(async () => render(await api.get("/environment")));
    if (!stopped) timer = setTimeout(load, 3000);
  };
  if (can("admin")) guard(async () => {
    const mods = await api.get("/modules");
    const envs = mods.items.filter((m) => m.type === "environment");
    choice.replaceChildren(...envs.map((m) => h("option", { value: m.id, selected: m.active, disabled: !m.enabled }, `${m.name} (${m.id})${m.enabled ? "" : " — disabled"}`)));
  });
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

// ---- services and tools ----------------------------------------------------

function jsonField(id, label, value) {
  const ta = h("textarea", { id, class: "code", rows: 4, spellcheck: "false" });
  ta.value = value === undefined ? "" : JSON.stringify(value, null, 2);
  return [labelled(label, ta), ta];
}

function parseJSON(ta, what) {
  if (!ta.value.trim()) return undefined;
  try { return JSON.parse(ta.value); } catch (err) { throw new Error(`${what} is not JSON: ${err.message}`); }
}

function toggle(label, checked, onchange) {
  const box = h("input", { type: "checkbox", checked, "aria-label": label });
  box.addEventListener("change", () => guard(async () => {
    try { await onchange(box.checked); } catch (err) { box.checked = !box.checked; throw err; }
    notice(`${label.replace(/^Enable /, "")}: ${box.checked ? "enabled" : "disabled"}.`, "info", box);
  }, box));
  return box;
}

function pageServices(main) {
  const list = h("tbody");
  const id = h("input", { id: "svc-id", required: true, pattern: "[A-Za-z_][A-Za-z0-9_]*", maxlength: "64" });
  const url = h("input", { id: "svc-url", type: "url", placeholder: "https://…/openapi.json" });
  const file = h("input", { id: "svc-file", type: "file", accept: ".json,.yaml,.yml,application/json" });
  const [configF, config] = jsonField("svc-config", "Config (JSON, optional)");
  const [secretsF, secrets] = jsonField("svc-secrets", "Secrets (JSON, optional, write-only)");
  const q = h("input", { id: "tool-q", type: "search", placeholder: "what should the tool do?" });
  const results = h("ul", { id: "tool-results", class: "results" });
  const load = () => can("admin") && guard(async () => {
    const svcs = await api.get("/services");
    list.replaceChildren(...svcs.items.map((s) => h("tr", {},
      h("td", {}, h("a", { href: "#/services/" + encodeURIComponent(s.id) }, s.id)),
      h("td", {}, s.name), h("td", {}, String(s.toolCount)),
      h("td", {}, toggle(`Enable service ${s.id}`, s.enabled, (on) => api.patch(`/services/${encodeURIComponent(s.id)}`, { enabled: on }))))));
    if (!svcs.items.length) list.append(h("tr", {}, h("td", { colspan: "4", class: "muted" }, "No services yet: import an OpenAPI document below.")));
  });
  let searches = 0;
  const search = () => guard(async () => {
    const p = new URLSearchParams({ limit: "20" });
    if (q.value) p.set("q", q.value);
    const n = ++searches;
    const tools = await api.get("/tools?" + p);
    if (n !== searches) return; // a later search is under way: its answer wins
    results.replaceChildren(...tools.items.map((t) => h("li", {},
      h("a", { href: `#/tools/${encodeURIComponent(t.serviceId)}/${encodeURIComponent(t.id)}` }, `${t.serviceId}.${t.id}`),
      t.enabled ? "" : h("span", { class: "badge off" }, "disabled"),
      h("div", { class: "muted" }, t.description || t.name))));
    if (!tools.items.length) results.append(h("li", { class: "muted" }, "No tools match."));
  });
  let debounce = null;
  q.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(search, 200); });
  const importForm = h("form", { "aria-label": "Import a service", onsubmit: (ev) => {
    ev.preventDefault();
    guard(async () => {
      const body = { id: id.value, adapter: "openapi", source: {} };
      if (file.files.length) body.source.content = await file.files[0].text();
      else if (url.value) body.source.url = url.value;
      else throw new Error("Give the document's URL or choose its file.");
      const c = parseJSON(config, "Config"), s = parseJSON(secrets, "Secrets");
      if (c !== undefined) body.config = c;
      if (s !== undefined) body.secrets = s;
      const svc = await api.post("/services", body);
      importForm.reset();
      // The lists above grow: tell the result once they have, so it stays
      // in view.
      await Promise.all([load(), search()]);
      notice(`Imported ${svc.id}: ${svc.toolCount} tools${svc.enabled ? "" : " (not enabled: set its config and secrets)"}.`, "info", importForm);
    }, importForm);
  } }, labelled("Service id (the name programs use)", id), labelled("Document URL", url), labelled("…or document file", file), configF, secretsF,
  h("button", { type: "submit", id: "svc-import" }, "Import"));
  main.append(h("h1", {}, "Services & tools"),
    section("Search tools", labelled("Search", q), results),
    adminOnly(section("Services", h("div", { class: "scroll" }, h("table", { "aria-label": "Services" },
      h("thead", {}, h("tr", {}, ["Id", "Name", "Tools", "Enabled"].map((t) => h("th", { scope: "col" }, t)))), list)))),
    adminOnly(section("Import an OpenAPI document", importForm)),
    h("p", { class: "muted", "data-hide-for": "admin", id: "admin-note" }, "Services are imported and configured with an admin key; this key can search and read tools."));
  load();
  search();
  return () => clearTimeout(debounce);
}

// fields lists a config or secrets schema's top-level properties with their
// descriptions, so a person knows what to write.
function fields(schema) {
  const props = Object.entries((schema && schema.properties) || {});
  if (!props.length) return h("p", { class: "muted" }, "No fields.");
  const required = new Set((schema && schema.required) || []);
  return h("ul", { class: "hint" }, props.map(([k, p]) => h("li", {}, h("code", {}, k),
    ` (${p.type || "any"}${required.has(k) ? ", required" : ""})`, p.description ? ": " + p.description : "")));
}

function pageService(main, params, sid) {
  const base = "/services/" + encodeURIComponent(sid);
  main.append(h("h1", {}, `Service ${sid}`), h("p", {}, h("a", { href: "#/services" }, "← services")));
  if (!can("admin")) {
    main.append(h("p", { class: "error", id: "needs-admin" }, "Services are managed with an admin key; this key's roles do not allow it."));
    return;
  }
  const info = h("div"), tools = h("tbody");
  const [configF, config] = jsonField("cfg", "Config (JSON)");
  const [secretsF, secrets] = jsonField("sec", "New secrets (JSON; replaces the set)");
  const secretsSet = h("p", { class: "muted" });
  const configSchema = h("div"), secretsSchema = h("div");
  main.append(info,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: (ev) => { const at = ev.currentTarget; guard(async () => { const r = await api.post(base + "/refresh"); notice(`Refreshed: ${r.added.length} added, ${r.removed.length} removed.`, "info", at); load(); }, at); } }, "Refresh from source"),
      h("button", { type: "button", class: "danger", onclick: (ev) => guard(async () => { if (!confirm(`Remove service ${sid}?`)) return; await api.del(base); location.hash = "#/services"; }, ev.currentTarget) }, "Remove")),
    section("Config", h("form", { onsubmit: (ev) => { ev.preventDefault(); const f = ev.currentTarget; guard(async () => { await api.put(base + "/config", parseJSON(config, "Config") || {}); notice("Config saved.", "info", f); load(); }, f); } },
      configF, configSchema, h("button", { type: "submit", id: "cfg-save" }, "Save config"))),
    section("Secrets", secretsSet, h("form", { onsubmit: (ev) => { ev.preventDefault(); const f = ev.currentTarget; guard(async () => { await api.put(base + "/secrets", parseJSON(secrets, "Secrets") || {}); secrets.value = ""; notice("Secrets saved.", "info", f); load(); }, f); } },
      secretsF, secretsSchema, h("button", { type: "submit", id: "sec-save" }, "Save secrets"))),
    section("Tools", h("div", { class: "scroll" }, h("table", { "aria-label": "Tools" },
      h("thead", {}, h("tr", {}, ["Tool", "Description", "Enabled"].map((t) => h("th", { scope: "col" }, t)))), tools))));
  const load = () => guard(async () => {
    const s = await api.get(base);
    info.replaceChildren(h("dl", { class: "meta" }, [["Name", s.name], ["Description", s.description || "—"], ["Source", s.sourceUrl || "inline document"],
      ["Enabled", toggle(`Enable service ${sid}`, s.enabled, (on) => api.patch(base, { enabled: on }))], ["Updated", when(s.updatedAt)]]
      .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
    config.value = JSON.stringify(s.config || {}, null, 2);
    configSchema.replaceChildren(fields(s.configSchema));
    secretsSchema.replaceChildren(fields(s.secretsSchema));
    secretsSet.textContent = s.secretsSet && s.secretsSet.length ? "Set: " + s.secretsSet.join(", ") + " (values are never shown)." : "No secrets set.";
    tools.replaceChildren(...(s.tools || []).map((t) => h("tr", {},
      h("td", {}, h("a", { href: `#/tools/${encodeURIComponent(sid)}/${encodeURIComponent(t.id)}` }, t.id)),
      h("td", {}, t.description || t.name),
      h("td", {}, toggle(`Enable tool ${t.id}`, t.enabled, (on) => api.patch(`/tools/${encodeURIComponent(sid)}/${encodeURIComponent(t.id)}`, { enabled: on }))))));
  });
  load();
}

function pageTool(main, params, sid, tid) {
  const path = `/tools/${encodeURIComponent(sid)}/${encodeURIComponent(tid)}`;
  main.append(h("h1", {}, `${sid}.${tid}`), h("p", {}, h("a", { href: "#/services/" + encodeURIComponent(sid) }, `← service ${sid}`)));
  const head = h("div"), docs = h("div", { id: "tool-docs" }), schemas = h("div");
  main.append(head, section("How a program calls it", docs), schemas);
  guard(async () => {
    const t = await api.get(path);
    head.replaceChildren(h("p", {}, t.description || t.name),
      h("p", { "data-needs": "admin" }, h("label", {}, toggle(`Enable tool ${tid}`, t.enabled, (on) => api.patch(path, { enabled: on })), " Enabled")),
      t.enabled ? null : h("p", { class: "muted" }, "Disabled: programs cannot call it."));
    schemas.replaceChildren(section("Input schema", tree(t.inputSchema)), section("Output schema", tree(t.outputSchema)));
  });
  guard(async () => docs.replaceChildren(markdown(await api.get(path + "/docs"))));
}

// ---- approvals -------------------------------------------------------------

function pageApprovals(main) {
  const list = h("div", { id: "approvals" });
  main.append(h("h1", {}, "Approvals"), h("p", { class: "muted" }, "Tool calls waiting for a person's decision."), list);
  let timer = null, stopped = false;
  const decide = (a, how) => guard(async () => {
    await api.post(`/approvals/${encodeURIComponent(a.id)}/${how}`);
    notice(`${how === "approve" ? "Approved" : "Denied"} ${a.serviceId}.${a.toolId}.`);
    load();
  });
  const load = async () => {
    clearTimeout(timer);
    await guard(async () => {
      const res = await api.get("/approvals?state=pending");
      list.replaceChildren(...res.items.map((a) => h("article", { class: "card" },
        h("h2", {}, `${a.serviceId}.${a.toolId}`),
        h("p", { class: "muted" }, a.pid ? h("a", { href: "#/processes/" + a.pid }, `process ${a.pid}`) : "no process", ` · asked ${when(a.createdAt)} · expires ${when(a.expiresAt)}`),
        tree(a.parameters, "parameters"),
        h("div", { class: "actions" },
          h("button", { type: "button", onclick: () => decide(a, "approve"), "aria-label": `Approve ${a.serviceId}.${a.toolId} (${a.id})` }, "Approve"),
          h("button", { type: "button", class: "danger", onclick: () => decide(a, "deny"), "aria-label": `Deny ${a.serviceId}.${a.toolId} (${a.id})` }, "Deny")))));
      if (!res.items.length) list.append(h("p", { class: "muted" }, "Nothing is waiting."));
    });
    if (!stopped) timer = setTimeout(load, 2000);
  };
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

// ---- routing ---------------------------------------------------------------

const routes = [
  [/^\/processes\/(\d+)$/, pageProcess, "processes"],
  [/^\/processes$/, pageProcesses, "processes"],
  [/^\/run$/, pageRun, "run"],
  [/^\/environment$/, pageEnvironment, "environment"],
  [/^\/services\/([^/]+)$/, pageService, "services"],
  [/^\/services$/, pageServices, "services"],
  [/^\/tools\/([^/]+)\/([^/]+)$/, pageTool, "services"],
  [/^\/approvals$/, pageApprovals, "approvals"],
];

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
