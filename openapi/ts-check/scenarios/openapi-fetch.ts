// The scenarios through openapi-fetch with the types openapi-typescript
// generated from the committed spec (gen/openapi-typescript.ts).
import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { components, paths } from "../gen/openapi-typescript.js";
import { apiKey, baseUrl, probe, problem, program, runAll } from "./harness.js";

type Process = components["schemas"]["Process"];

const cyrnel = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });

async function health(): Promise<void> {
  const { data, response } = await createClient<paths>({ baseUrl }).GET("/health");
  assert.equal(response.status, 200);
  assert.equal(data?.status, "ok");
}

async function runCode(): Promise<void> {
  const { data, error } = await cyrnel.POST("/processes", { body: { code: program, waitMs: 30000, ref: "ts-openapi-fetch" } });
  if (error) throw new Error(`create: ${JSON.stringify(error)}`);
  const p: Process = data;
  assert.equal(p.state, "idle");
  assert.equal(p.exitState, "success");
  assert.equal(p.reason, "completed");
  assert.equal(p.stdout, "hi\n");
  assert.deepEqual(p.output, { answer: 42 });
  const stdout = await cyrnel.GET("/processes/{pid}/stdout", { params: { path: { pid: p.pid } }, parseAs: "text" });
  assert.equal(stdout.data, "hi\n");
  const file = await cyrnel.GET("/processes/{pid}/files/{path}", { params: { path: { pid: p.pid, path: "out.txt" } }, parseAs: "text" });
  assert.equal(file.data, "from the program");
}

async function waitForProcess(): Promise<void> {
  const created = await cyrnel.POST("/processes", { body: { code: "import time\ntime.sleep(0.3)\ncyrnel.output({'slept': True})" } });
  if (created.error) throw new Error(`create: ${JSON.stringify(created.error)}`);
  assert.notEqual(created.data.state, "idle", "the process is still running when create answers");
  const { data, error } = await cyrnel.GET("/processes/{pid}/wait", {
    params: { path: { pid: created.data.pid }, query: { timeoutMs: 30000 } },
  });
  if (error) throw new Error(`wait: ${JSON.stringify(error)}`);
  assert.equal(data.state, "idle");
  assert.equal(data.exitState, "success");
  const output = await cyrnel.GET("/processes/{pid}/output", { params: { path: { pid: data.pid } } });
  assert.deepEqual(output.data, { slept: true });
}

async function listProcesses(): Promise<void> {
  const { data, error } = await cyrnel.GET("/processes", { params: { query: { ref: "ts-openapi-fetch", limit: 10 } } });
  if (error) throw new Error(`list: ${JSON.stringify(error)}`);
  assert.equal(data.items.length, 1, "the one process run with this ref");
  assert.equal(data.items[0]?.exitState, "success");
  assert.equal(data.hasMore, false);
}

async function sessionFiles(): Promise<void> {
  const s = await cyrnel.POST("/sessions", { body: { ref: "ts-openapi-fetch" } });
  if (s.error) throw new Error(`session: ${JSON.stringify(s.error)}`);
  const id = s.data.id;
  const put = await cyrnel.PUT("/sessions/{id}/files/{path}", {
    params: { path: { id, path: "data/in.csv" } },
    body: "a,b\n1,2\n",
    bodySerializer: (b: string) => b,
    headers: { "Content-Type": "text/csv" },
  });
  assert.equal(put.response.status, 204, JSON.stringify(put.error));
  const run = await cyrnel.POST("/processes", {
    body: { session: id, waitMs: 30000, code: "rows = open('data/in.csv').read().splitlines()\nopen('rows.txt', 'w').write(str(len(rows)))" },
  });
  assert.equal(run.data?.exitState, "success", JSON.stringify(run.error ?? run.data));
  const files = await cyrnel.GET("/sessions/{id}/files", { params: { path: { id } } });
  assert.deepEqual(files.data?.items.map((f) => f.path).sort(), ["data/in.csv", "rows.txt"]);
  const got = await cyrnel.GET("/sessions/{id}/files/{path}", { params: { path: { id, path: "rows.txt" } }, parseAs: "text" });
  assert.equal(got.data, "2");
  const del = await cyrnel.DELETE("/sessions/{id}", { params: { path: { id } } });
  assert.equal(del.response.status, 204);
}

async function errorsAreProblems(): Promise<void> {
  const missing = await cyrnel.GET("/processes/{pid}", { params: { path: { pid: 999999999 } } });
  problem(missing.response, missing.error, 404);
  const bad = await cyrnel.POST("/processes", { body: { code: "pass", timeoutMs: 86400001 }, headers: probe });
  problem(bad.response, bad.error, 422, "body.timeoutMs");
  const anonymous = await createClient<paths>({ baseUrl }).GET("/processes");
  problem(anonymous.response, anonymous.error, 401);
}

await runAll("openapi-fetch", [
  ["health", health],
  ["run code", runCode],
  ["wait for a process", waitForProcess],
  ["list processes", listProcesses],
  ["session file upload and download", sessionFiles],
  ["errors are RFC 9457 problems", errorsAreProblems],
]);
