// cyrnel console: the approvals page (tool calls waiting for a decision).
// Loaded after app.js, whose helpers and routes it uses.
"use strict";

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

routes.push([/^\/approvals$/, pageApprovals, "approvals"]);
