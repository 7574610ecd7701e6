// cyrnel console: the environment page (the active environment, its
// sandbox in words). Loaded after app.js, whose helpers and routes it uses.
"use strict";

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

routes.push([/^\/environment$/, pageEnvironment, "environment"]);
