// Dredd hooks for cyrnel (TestDredd, tests/dredd_test.go). Every
// transaction of the document runs: a success against objects the test made
// beforehand, an error status provoked the way a client meets it, or a skip
// whose reason is in SKIPS. The test passes what it made in
// CYRNEL_DREDD_FIXTURES (JSON: keys, ids, bodies) and the document's path in
// CYRNEL_DREDD_DOCUMENT.
const fs = require("node:fs");
const hooks = require("hooks");
const { fromSchema } = require("@openapi-contrib/openapi-schema-to-json-schema");

const fx = JSON.parse(process.env.CYRNEL_DREDD_FIXTURES);
const doc = JSON.parse(fs.readFileSync(process.env.CYRNEL_DREDD_DOCUMENT, "utf8"));

// Statuses no request from outside can provoke on a healthy single host.
const SKIPS = {
  500: "an internal error: nothing a client sends makes a healthy server fail",
  507: "needs the database's disk to be full",
  "503 /health/ready": "needs a corrupt database or an active environment that failed to set up",
  "503 /processes": "needs the active environment to be unavailable (its set-up failed)",
  "503 /sessions POST": "needs the active environment or the database to be unavailable",
  "503 /sessions": "needs the host running the session to be unreachable (several hosts on one PostgreSQL)",
  "413 /services POST": "its limit is 64 MiB: a body past it is a test of the transport, not the contract",
};

// The parts of a transaction's name: "/path/{param} > Summary > status > media type".
function parts(t) {
  const [template, , status, mediaType] = t.name.split(" > ");
  return { template, method: t.request.method, status: Number(status), mediaType };
}

function operation(p) {
  return doc.paths[p.template][p.method.toLowerCase()];
}

// skipReason names why a transaction cannot run, or is undefined.
function skipReason(p) {
  const first = "/" + p.template.split("/")[1];
  for (const key of [`${p.status} ${p.template} ${p.method}`, `${p.status} ${first} ${p.method}`, `${p.status} ${p.template}`, `${p.status} ${first}`, `${p.status}`]) {
    if (SKIPS[key]) return SKIPS[key];
  }
  return undefined;
}

// forbiddenKey is a key whose role the operation does not allow.
function forbiddenKey(p) {
  const roles = operation(p)["x-cyrnel-roles"] || [];
  if (!roles.includes("runner")) return fx.keys.runner;
  if (!roles.includes("approver")) return fx.keys.approver;
  return undefined;
}

// The objects each path's parameters name, by method and status: the test
// made one of each kind per transaction that uses it up (deletes, decides,
// kills), one in the state a 409 needs, and one for the others.
function pathParams(p) {
  const ids = fx.ids;
  const at = (byCase, fallback) => byCase[`${p.method} ${p.status}`] ?? byCase[p.method] ?? fallback;
  const session = p.status === 409 ? ids.sessionEnded : ids.session;
  const special = {
    "/approvals/{id}/deny": { id: ids.approvalDeny },
    "/keys/{id}": { id: at({ DELETE: ids.keyDelete }, ids.key) },
    "/processes/{pid}": { pid: at({ "DELETE 204": ids.pidDelete, "DELETE 409": ids.pidRunning }, ids.pid) },
    "/processes/{pid}/kill": { pid: at({ "POST 200": ids.pidRunning }, ids.pid) },
    "/processes/{pid}/run": { pid: at({ "POST 200": ids.pidRun }, ids.pid) },
    "/processes/{pid}/files/{path}": { pid: ids.pid, path: "out.csv" },
    "/services/{id}": { id: at({ DELETE: ids.serviceDelete }, ids.service) },
    "/sessions/{id}": { id: at({ DELETE: ids.sessionDelete }, session) },
    "/sessions/{id}/files/{path}": { id: session, path: at({ DELETE: "gone.csv" }, "in.csv") },
    "/tools/{serviceId}/{toolId}/invoke": {
      serviceId: p.status === 502 ? ids.offlineService : ids.service,
      toolId: p.status === 409 ? ids.disabledTool : ids.tool,
    },
  }[p.template];
  if (special) return special;
  const id = { approvals: ids.approval, keys: ids.key, modules: ids.module, services: ids.service, sessions: session }[p.template.split("/")[1]];
  const values = { id, pid: ids.pid, serviceId: ids.service, toolId: ids.tool };
  return Object.fromEntries([...p.template.matchAll(/\{(\w+)\}/g)].map((m) => [m[1], values[m[1]]]));
}

// The request bodies of successes and of the 409s a body provokes. Dredd
// makes a body from the schema with empty values ("", 0), which the schema
// itself forbids (minLength, minimum); the others keep it, refused before
// it is read.
function body(p) {
  const b = fx.bodies;
  const key = `${p.method} ${p.template} ${p.status}`;
  return {
    "POST /keys 201": { name: "dredd", roles: ["runner"] },
    "POST /processes 201": { code: "print('dredd')", waitMs: 30000 },
    "POST /sessions 201": {},
    "POST /sessions 429": {},
    "PUT /environment 200": { module: fx.ids.module },
    "PATCH /modules/{id} 200": { enabled: true },
    "PATCH /modules/{id} 409": { enabled: false },
    "PUT /modules/{id}/config 200": b.moduleConfig,
    "POST /processes 409": { code: "pass", session: fx.ids.sessionEnded },
    "POST /processes/{pid}/run 200": { force: true },
    "POST /processes/{pid}/run 409": {},
    "POST /services 201": b.service,
    "POST /services 409": { ...b.service, id: fx.ids.service },
    "PATCH /services/{id} 200": { enabled: true },
    "PUT /services/{id}/config 200": b.serviceConfig,
    "PUT /services/{id}/secrets 200": b.serviceSecrets,
    "PUT /tool-policies 200": { default: "allow", rules: [] },
    "PATCH /tools/{serviceId}/{toolId} 200": { enabled: true },
    "POST /tools/{serviceId}/{toolId}/invoke 200": b.invoke,
    "POST /tools/{serviceId}/{toolId}/invoke 409": b.invoke,
    "POST /tools/{serviceId}/{toolId}/invoke 502": b.invoke,
  }[key];
}

function setUri(t, p, params, query) {
  let path = p.template;
  for (const [name, value] of Object.entries(params)) {
    path = path.replace(`{${name}}`, encodeURIComponent(String(value)));
  }
  const q = query ?? (t.request.uri.includes("?") ? t.request.uri.slice(t.request.uri.indexOf("?")) : "");
  t.request.uri = path + q;
  t.fullPath = path + q;
}

function setBody(t, value, contentType) {
  t.request.body = typeof value === "string" ? value : JSON.stringify(value);
  t.request.headers["Content-Type"] = contentType ?? "application/json";
}

// The document's schema for the answer, as JSON Schema (draft 4) with the
// components its $refs name: Dredd's OpenAPI 3 parser gives Dredd no
// schema (it checks only that the keys of an example it generates are all
// present, which makes every optional property required), so the hooks
// hand it the document's own. OpenAPI's own formats are not JSON Schema's,
// and Dredd's validator refuses formats it does not know: they go, the
// ranges of int32 and int64 stay.
const openapiFormats = new Set(["int32", "int64", "float", "double", "byte", "binary"]);
const toJSONSchema = (s) =>
  fromSchema(s, {
    afterTransform: (out) => {
      if (openapiFormats.has(out.format)) delete out.format;
      return out;
    },
  });
const components = { schemas: Object.fromEntries(Object.entries(doc.components.schemas).map(([n, s]) => [n, toJSONSchema(s)])) };

function bodySchema(p, declared) {
  const content = operation(p).responses[declared]?.content?.[p.mediaType];
  if (!content?.schema || !/json$/.test(p.mediaType)) return undefined;
  return { ...toJSONSchema(content.schema), components };
}

// A `default` response reaches Dredd as status 200 with the problem media
// type: it is provoked with an unknown query parameter (422, answered by
// the default response of operations that list no 422).
function isDefault(p) {
  return p.status === 200 && p.mediaType === "application/problem+json";
}

hooks.beforeEach((t, done) => {
  prepare(t)
    .then(() => done())
    .catch((err) => {
      t.fail = `hook: ${err.stack ?? err}`;
      done();
    });
});

async function prepare(t) {
  const p = parts(t);
  // The key that owns the executions asking for approval cannot decide
  // them: an approver does.
  const key = p.template.startsWith("/approvals/{id}/") ? fx.keys.approver : fx.keys.admin;
  t.request.headers.Authorization = `Bearer ${key}`;
  const reason = skipReason(p);
  if (reason) {
    t.skip = true;
    hooks.log(`skip: ${t.name}: ${reason}`);
    return;
  }
  t.skip = false;
  const declared = isDefault(p) ? "default" : String(p.status);
  if (p.mediaType) t.expected.headers["Content-Type"] = p.mediaType;
  const schema = bodySchema(p, declared);
  if (schema) {
    t.expected.bodySchema = schema;
    delete t.expected.body;
  }
  const b = body(p);
  if (b !== undefined) setBody(t, b);
  setUri(t, p, pathParams(p));
  if (isDefault(p)) {
    t.expected.statusCode = "422";
    setUri(t, p, pathParams(p), "?bogus=1");
    return;
  }
  switch (p.status) {
    case 400: // malformed JSON; an upload without its file
      if (isUpload(p)) setBody(t, "", "text/csv");
      else setBody(t, '{"a": ');
      break;
    case 401:
      delete t.request.headers.Authorization;
      break;
    case 403: // a key of a role the operation refuses, else a foreign page's Origin
      if (forbiddenKey(p)) t.request.headers.Authorization = `Bearer ${forbiddenKey(p)}`;
      else t.request.headers.Origin = "https://elsewhere.example";
      break;
    case 404: {
      const params = pathParams(p);
      for (const name of Object.keys(params)) params[name] = name === "pid" ? 999999999 : "nope";
      setUri(t, p, params);
      break;
    }
    case 413: // past every limit but the service import's (SKIPS)
      if (isUpload(p)) setBody(t, "x".repeat(9 << 20), "text/csv");
      else setBody(t, { code: "x".repeat(9 << 20) });
      break;
    case 415:
      setBody(t, "a,b\n", "text/csv");
      break;
    case 422:
      setUri(t, p, pathParams(p), "?bogus=1");
      break;
    case 429:
      await fillSessions();
      break;
  }
  if (isUpload(p) && p.status !== 413 && p.status !== 400) setBody(t, "a,b\n1,2\n", "text/csv");
}

function isUpload(p) {
  return p.method === "PUT" && p.template === "/sessions/{id}/files/{path}";
}

// fillSessions starts sessions until the host's limit refuses one, so the
// transaction's own POST /sessions meets the limit.
async function fillSessions() {
  for (let i = 0; i < 16; i++) {
    const res = await fetch(`${fx.base}/sessions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${fx.keys.admin}`, "Content-Type": "application/json" },
      body: "{}",
    });
    await res.arrayBuffer();
    if (res.status === 429) return;
  }
  throw new Error("16 sessions started and none was refused: the host's session limit is not what the test set");
}

// Media type parameters (charset) are not part of the document's media
// type keys: Dredd compares the Content-Type whole, so it gets the type.
hooks.beforeEachValidation((t) => {
  const ct = t.real?.headers?.["content-type"];
  if (ct) t.real.headers["content-type"] = ct.split(";")[0].trim();
});
