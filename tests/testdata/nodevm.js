// The baseline of BenchmarkTypeScriptVsNode: Node running each program in a
// fresh context (vm.runInNewContext) behind its own HTTP server, with no
// sandbox, no store and no auth. POST a JSON {"code": "..."}; the answer is
// {"exitState": "success", "result": ...} or {"exitState": "failed", ...}.
// Prints the port it listens on (loopback), then serves until killed.
"use strict";
const http = require("http");
const vm = require("vm");

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let out;
    try {
      const { code } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      out = { exitState: "success", result: vm.runInNewContext(code, {}, { timeout: 30000 }) };
    } catch (e) {
      out = { exitState: "failed", error: String(e) };
    }
    const body = JSON.stringify(out);
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
    res.end(body);
  });
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
