// cyrnel console: the sessions pages (a list, and one session with its
// files, its recent processes and a button that ends it). Loaded after
// app.js, whose helpers and routes it uses.
"use strict";

const SESSION_STATES = ["", "starting", "ready", "busy", "ended"];

function pageSessions(main, params) {
  const state = select("state", SESSION_STATES.map((s) => [s, s || "any"]), params.get("state") || "");
  const body = h("tbody");
  const more = h("p", { class: "muted" });
  main.append(h("h1", {}, "Sessions"),
    h("p", { class: "muted" }, "A session keeps one interpreter, its variables and its files between executions."),
    h("form", { class: "filters", role: "search", "aria-label": "Filter sessions", onsubmit: (e) => e.preventDefault() }, labelled("State", state)),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Sessions" },
      h("thead", {}, h("tr", {}, ["Session", "State", "Module", "Ref", "Owner", "Created", "Last used"].map((t, i) => h("th", { scope: "col", class: i > 4 ? "wide" : null }, t)))),
      body)), more);
  let timer = null, stopped = false;
  const load = async () => {
    clearTimeout(timer);
    const q = new URLSearchParams({ limit: "50" });
    if (state.value) q.set("state", state.value);
    await guard(async () => {
      const list = await api.get("/sessions?" + q);
      body.replaceChildren(...list.items.map((s) => h("tr", { "data-session": s.id },
        h("td", { class: "id" }, h("a", { href: "#/sessions/" + encodeURIComponent(s.id) }, s.id)),
        h("td", {}, badge(s.state), s.endReason ? h("span", { class: "muted" }, " " + s.endReason) : null),
        h("td", {}, s.module),
        h("td", {}, s.ref || ""),
        h("td", {}, s.owner || "—"),
        h("td", { class: "wide" }, when(s.createdAt)),
        h("td", { class: "wide" }, when(s.lastUsedAt)))));
      more.textContent = list.items.length ? (list.hasMore ? "Showing the newest 50." : "") : "No sessions match.";
    });
    if (!stopped) timer = setTimeout(load, 3000);
  };
  state.addEventListener("input", () => {
    history.replaceState(null, "", "#/sessions" + (state.value ? "?state=" + state.value : ""));
    load();
  });
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

function pageSession(main, params, sid) {
  const path = "/sessions/" + encodeURIComponent(sid);
  const meta = h("dl", { class: "meta" });
  const files = h("div", { id: "session-files" });
  const procs = h("div", { id: "session-processes" });
  const end = h("button", { type: "button", class: "danger", id: "session-end", "data-needs": "runner", onclick: () => guard(async () => {
    if (!confirm(`End session ${sid}? Its interpreter, variables and files are gone.`)) return;
    await api.del(path);
    notice("Session ended.", "info", end);
    load();
  }, end) }, "End session");
  main.append(h("h1", {}, `Session ${sid}`), h("p", {}, h("a", { href: "#/sessions" }, "← all sessions")),
    h("div", { class: "actions" }, end), meta, section("Files", files), section("Recent processes", procs));
  const load = () => guard(async () => {
    const s = await api.get(path);
    // The API lists processes newest first without a session filter: the
    // page shows this session's among the newest 100.
    const recent = (await api.get("/processes?limit=100")).items.filter((p) => p.session === sid);
    const rows = [["State", badge(s.state)], ["End reason", s.endReason || "—"], ["Ref", s.ref || "—"], ["Module", s.module],
      ["Owner", s.owner || "—"], ["Host", recent.length && recent[0].hostId ? `${recent[0].hostId} (its latest process's)` : "—"],
      ["Created", when(s.createdAt)], ["Last used", when(s.lastUsedAt)], ["Ended", when(s.endedAt)],
      ["Idle timeout", s.idleTimeoutMs + " ms"], ["Max lifetime", s.maxLifetimeMs + " ms"]];
    if (s.cpuMs != null) rows.push(["CPU", s.cpuMs + " ms"]);
    if (s.memoryBytes != null) rows.push(["Memory", (s.memoryBytes / 1048576).toFixed(1) + " MiB"]);
    meta.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k.toLowerCase().replace(/ /g, "-") }, v)]));
    end.disabled = s.state === "ended";
    procs.replaceChildren(recent.length ? h("ul", {}, recent.map((p) => h("li", {}, h("a", { href: "#/processes/" + p.pid }, `Process ${p.pid}`),
      " ", badge(p.exitState || p.state), p.ref ? h("span", { class: "muted" }, " " + p.ref) : null)))
      : h("p", { class: "muted" }, "None among the newest 100 processes."));
    if (s.state === "ended") { files.replaceChildren(h("p", { class: "muted" }, "The session has ended: its files are gone.")); return; }
    const list = await api.get(path + "/files");
    files.replaceChildren(list.items.length ? h("ul", {}, list.items.map((f) =>
      h("li", {}, h("button", { type: "button", class: "linklike", onclick: () => download(`${path}/files/${encodePath(f.path)}`, f.path) }, f.path),
        h("span", { class: "muted" }, ` ${f.size} bytes`))))
      : h("p", { class: "muted" }, "No files."));
  });
  load();
}

routes.push([/^\/sessions\/([^/]+)$/, pageSession, "sessions"], [/^\/sessions$/, pageSessions, "sessions"]);
