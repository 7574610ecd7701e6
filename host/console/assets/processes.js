// cyrnel console: the processes pages (the list, one process followed
// live, and Run, which shows the new process under its editor). Loaded
// after app.js, whose helpers and routes it uses.
"use strict";

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

routes.push([/^\/processes\/(\d+)$/, pageProcess, "processes"], [/^\/processes$/, pageProcesses, "processes"], [/^\/run$/, pageRun, "run"]);
