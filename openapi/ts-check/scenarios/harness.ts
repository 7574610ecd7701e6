// Runs named scenarios against the server at CYRNEL_URL with the key in
// CYRNEL_API_KEY, one JSON line per scenario on stdout; the exit status is
// 1 when any failed. TestTypeScriptClients (tests/) reads the lines.
import assert from "node:assert/strict";

export type Scenario = [name: string, run: () => Promise<void>];

export const baseUrl = process.env.CYRNEL_URL ?? "http://127.0.0.1:9371";
export const apiKey = process.env.CYRNEL_API_KEY ?? "";

export async function runAll(client: string, scenarios: Scenario[]): Promise<void> {
  for (const [scenario, run] of scenarios) {
    try {
      await run();
      console.log(JSON.stringify({ client, scenario, ok: true }));
    } catch (err) {
      const error = err instanceof Error ? (err.stack ?? err.message) : JSON.stringify(err);
      console.log(JSON.stringify({ client, scenario, ok: false, error }));
      process.exitCode = 1;
    }
  }
}

// probe marks a request meant to break the document: the validating proxy
// TestTypeScriptClients puts in front of the server checks only its answer.
export const probe = { "X-Contract-Probe": "1" };

// A program that leaves a file and an output, as the process scenarios run.
export const program = "open('out.txt', 'w').write('from the program')\nprint('hi')\ncyrnel.output({'answer': 42})";

// problem checks an error answer is an RFC 9457 problem for status, naming
// location among its errors when given.
export function problem(res: Response, body: unknown, status: number, location?: string): void {
  assert.equal(res.status, status);
  assert.equal(res.headers.get("content-type"), "application/problem+json");
  const p = body as { status?: number; title?: string; detail?: string; errors?: { location?: string }[] | null };
  assert.equal(p.status, status);
  assert.ok(p.title, "a problem has a title");
  assert.ok(p.detail, "a problem has a detail");
  if (location) {
    assert.ok(p.errors?.some((e) => e.location === location), `no error at ${location}: ${JSON.stringify(p)}`);
  }
}
