// cyrnel console: the services and tools pages (the list and import, one
// service, one tool). Loaded after app.js, whose helpers and routes it uses.
"use strict";

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

routes.push([/^\/services\/([^/]+)$/, pageService, "services"], [/^\/services$/, pageServices, "services"], [/^\/tools\/([^/]+)\/([^/]+)$/, pageTool, "services"]);
