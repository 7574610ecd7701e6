// The scenarios through the SDK @hey-api/openapi-ts generated from the
// committed spec (gen/hey-api): its zod schemas check every JSON body the
// server answers, so a response the document does not describe fails here.
import assert from "node:assert/strict";
import { client } from "../gen/hey-api/client.gen.js";
import {
  createProcess,
  createSession,
  deleteSession,
  getHealth,
  getProcess,
  getProcessFile,
  getProcessOutput,
  getSessionFile,
  listProcesses,
  listSessionFiles,
  putSessionFile,
  waitProcess,
} from "../gen/hey-api/sdk.gen.js";
import { zErrorModel } from "../gen/hey-api/zod.gen.js";
import { apiKey, baseUrl, probe, problem, program, runAll } from "./harness.js";

client.setConfig({ baseUrl, auth: apiKey });

async function health(): Promise<void> {
  const { data, response } = await getHealth({ throwOnError: true });
  assert.equal(response.status, 200);
  assert.equal(data.status, "ok");
}

async function runCode(): Promise<void> {
  const { data: p } = await createProcess({ body: { code: program, waitMs: 30000, ref: "ts-hey-api" }, throwOnError: true });
  assert.equal(p.state, "idle");
  assert.equal(p.exitState, "success");
  assert.equal(p.reason, "completed");
  assert.equal(p.stdout, "hi\n");
  assert.deepEqual(p.output, { answer: 42 });
  const file = await getProcessFile({ path: { pid: p.pid, path: "out.txt" }, throwOnError: true });
  // The type says Blob | File, and File is also the name of cyrnel's file
  // listing entry, which shadows the DOM's in the generated types.
  assert.ok(file.data instanceof Blob);
  assert.equal(await file.data.text(), "from the program");
}

async function waitForProcess(): Promise<void> {
  const { data: created } = await createProcess({
    body: { code: "import time\ntime.sleep(0.3)\ncyrnel.output({'slept': True})" },
    throwOnError: true,
  });
  assert.notEqual(created.state, "idle", "the process is still running when create answers");
  const { data: p } = await waitProcess({ path: { pid: created.pid }, query: { timeoutMs: 30000 }, throwOnError: true });
  assert.equal(p.state, "idle");
  assert.equal(p.exitState, "success");
  const { data: output } = await getProcessOutput({ path: { pid: p.pid }, throwOnError: true });
  assert.deepEqual(output, { slept: true });
}

async function listTheProcesses(): Promise<void> {
  const { data } = await listProcesses({ query: { ref: "ts-hey-api", limit: 10 }, throwOnError: true });
  assert.equal(data.items.length, 1, "the one process run with this ref");
  assert.equal(data.items[0]?.exitState, "success");
  assert.equal(data.hasMore, false);
}

async function sessionFiles(): Promise<void> {
  const { data: s } = await createSession({ body: { ref: "ts-hey-api" }, throwOnError: true });
  const put = await putSessionFile({
    path: { id: s.id, path: "data/in.csv" },
    body: new Blob(["a,b\n1,2\n"]),
    headers: { "Content-Type": "text/csv" },
  });
  assert.equal(put.response?.status, 204, JSON.stringify(put.error));
  const { data: run } = await createProcess({
    body: { session: s.id, waitMs: 30000, code: "rows = open('data/in.csv').read().splitlines()\nopen('rows.txt', 'w').write(str(len(rows)))" },
    throwOnError: true,
  });
  assert.equal(run.exitState, "success", run.error);
  const { data: files } = await listSessionFiles({ path: { id: s.id }, throwOnError: true });
  assert.deepEqual(files.items.map((f) => f.path).sort(), ["data/in.csv", "rows.txt"]);
  const { data: got } = await getSessionFile({ path: { id: s.id, path: "rows.txt" }, throwOnError: true });
  assert.ok(got instanceof Blob);
  assert.equal(await got.text(), "2");
  const del = await deleteSession({ path: { id: s.id } });
  assert.equal(del.response?.status, 204);
}

// answeredProblem checks an error answer against the generated ErrorModel
// schema and as a problem (the schema's parse turns int64 into bigint, so
// the fields are read from the body as sent).
function answeredProblem(r: { response?: Response; error: unknown }, status: number, location?: string): void {
  assert.ok(r.response, "the server answered");
  zErrorModel.parse(r.error);
  problem(r.response, r.error, status, location);
}

async function errorsAreProblems(): Promise<void> {
  answeredProblem(await getProcess({ path: { pid: 999999999 } }), 404);
  answeredProblem(await createProcess({ body: { code: "pass", timeoutMs: 86400001 }, headers: probe }), 422, "body.timeoutMs");
  answeredProblem(await listProcesses({ security: [] }), 401);
}

await runAll("hey-api", [
  ["health", health],
  ["run code", runCode],
  ["wait for a process", waitForProcess],
  ["list processes", listTheProcesses],
  ["session file upload and download", sessionFiles],
  ["errors are RFC 9457 problems", errorsAreProblems],
]);
