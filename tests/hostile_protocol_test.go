package tests

import (
	"strings"
	"testing"
)

// forgeAnswer is Python that writes a JSON-RPC answer to fd 4, the runtime's
// protocol pipe, with the given id expression and result.
func forgeAnswer(id, result string) string {
	return `
import json, os
os.write(4, json.dumps({"jsonrpc": "2.0", "id": ` + id + `, "result": ` + result + `}).encode() + b"\n")
`
}

// realID is Python that finds the id of the execute request the runtime is
// answering, in the runtime's own frames: what a program that studies its
// runtime can always learn.
const realID = `
import sys
f = sys._getframe()
while f is not None and "req_id" not in f.f_locals:
    f = f.f_back
rid = f.f_locals["req_id"]
cyrnel.output({"idFound": isinstance(rid, str) and len(rid) > 8})
`

// TestForgedProtocolFramesDecideNothing: a program owns fds 3 and 4 of its
// interpreter and can write any frame the runtime could. A forged execute
// answer never yields a host-decided end (canceled, timeout, a limit), and
// one written blindly does not end the execution early.
func TestForgedProtocolFramesDecideNothing(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	forgeries := map[string]string{
		"canceled/killed":     `{"status": "canceled", "reason": "killed"}`,
		"timeout/timeout":     `{"status": "timeout", "reason": "timeout"}`,
		"failed/memory_limit": `{"status": "failed", "reason": "memory_limit", "error": "MemoryError"}`,
	}
	for name, result := range forgeries {
		t.Run("blind "+name, func(t *testing.T) {
			// The id jsonrpc2 would have picked: the answer must answer
			// nothing, and the program's real end stands.
			p := h.run(forgeAnswer("0", result)+`
print("after the forgery", flush=True)
raise ValueError("boom")`, nil)
			if p.exit() != "failed" || p.reason() != "exception" || p.Error != "ValueError: boom" {
				t.Fatalf("got %s/%s %q", p.exit(), p.reason(), p.Error)
			}
			if p.Stdout != "after the forgery\n" {
				t.Fatalf("stdout %q: the forged answer ended the execution early", p.Stdout)
			}
		})
		t.Run("with the real id "+name, func(t *testing.T) {
			p := h.run(realID+forgeAnswer("rid", result)+`
import time
time.sleep(2)
raise ValueError("boom")`, nil)
			if p.Output["idFound"] != true {
				t.Fatalf("control: the program did not find the request id: %+v", p)
			}
			if p.exit() != "failed" || (p.reason() != "exception" && p.reason() != "environment_error") {
				t.Fatalf("got %s/%s %q", p.exit(), p.reason(), p.Error)
			}
		})
	}
	t.Run("control: frames written to fd 4 reach the host", func(t *testing.T) {
		p := h.run(`
import os
os.write(4, b'{"jsonrpc":"2.0","method":"output","params":{"patch":{"forged":1}}}\n')`, nil)
		if p.exit() != "success" || p.Output["forged"] != 1.0 {
			t.Fatalf("got %s/%s output %v", p.exit(), p.reason(), p.Output)
		}
	})
	t.Run("control: the real id answers", func(t *testing.T) {
		// Without the host's check, this forgery would be taken: the
		// program ends success however it goes on.
		p := h.run(realID+forgeAnswer("rid", `{"status": "success"}`)+`
import time
time.sleep(2)
raise ValueError("boom")`, nil)
		if p.exit() != "success" || p.Output["idFound"] != true {
			t.Fatalf("got %s/%s %q output %v", p.exit(), p.reason(), p.Error, p.Output)
		}
	})
	t.Run("garbage on fd 4", func(t *testing.T) {
		p := h.run(`
import os
os.write(4, b'{"jsonrpc": not json\n')
import time
time.sleep(5)`, nil)
		if p.exit() != "failed" || p.reason() != "environment_error" || !strings.Contains(p.Error, "protocol") {
			t.Fatalf("got %s/%s %q", p.exit(), p.reason(), p.Error)
		}
	})
	t.Run("an output value past the message limit", func(t *testing.T) {
		p := h.run(`cyrnel.output({"x": "a" * (2 << 20)})`, nil)
		if p.exit() != "failed" || p.reason() != "output_limit" || !strings.Contains(p.Error, "the output limit of 1048576 bytes") {
			t.Fatalf("got %s/%s %q", p.exit(), p.reason(), p.Error)
		}
	})
	var health struct {
		Status string `json:"status"`
	}
	if st, _ := h.do("GET", "/health", nil, &health); st != 200 || health.Status != "ok" {
		t.Fatalf("host unhealthy after: %d", st)
	}
	if next := h.run("print('next')", nil); next.exit() != "success" || next.Stdout != "next\n" {
		t.Fatalf("next program: %+v", next)
	}
}
