// A small program against the client generated from cyrnel's spec: run code,
// read its output and stdout. `make ts-check` type-checks it; a spec change
// that breaks what a TypeScript user writes fails the check.
import createClient from "openapi-fetch";
import type { components, paths } from "./cyrnel.gen";

type Process = components["schemas"]["Process"];
type CreateProcess = components["schemas"]["CreateProcessInputBody"];

export function connect(baseUrl = "http://127.0.0.1:9371", apiKey?: string) {
  return createClient<paths>({ baseUrl, headers: apiKey ? { Authorization: `Bearer ${apiKey}` } : {} });
}

export async function run(cyrnel: ReturnType<typeof connect>, code: string): Promise<Process> {
  const body: CreateProcess = { code, waitMs: 30000, timeoutMs: 10000 };
  const { data, error } = await cyrnel.POST("/processes", { body });
  if (error) throw new Error(`${error.status} ${error.detail ?? error.title ?? ""}`);
  return data;
}

export async function main(apiKey?: string): Promise<void> {
  const cyrnel = connect(undefined, apiKey);
  const p = await run(cyrnel, "print('hi')\ncyrnel.output({'answer': 42})");
  const exit: "success" | "failed" | "timeout" | "canceled" | null = p.exitState;
  console.log(p.pid, p.state, exit, p.reason, p.stdout);

  const output = await cyrnel.GET("/processes/{pid}/output", { params: { path: { pid: p.pid } } });
  if (output.data) console.log(output.data["answer"]);

  const stdout = await cyrnel.GET("/processes/{pid}/stdout", {
    params: { path: { pid: p.pid } },
    parseAs: "text",
  });
  console.log(stdout.data?.trimEnd());

  const waited = await cyrnel.GET("/processes/{pid}/wait", {
    params: { path: { pid: p.pid }, query: { timeoutMs: 1000 } },
  });
  if (waited.data?.state === "idle") console.log(waited.data.durationMs);
}
