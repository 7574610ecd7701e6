package tests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// strays lists host processes whose command line contains marker.
func strays(marker string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), marker) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// TestHostileProgramsAreContained runs what a hostile user would try. After
// each, the host answers, the next program runs normally, and nothing it
// started is left on the machine.
func TestHostileProgramsAreContained(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	canary := "CYRNEL_CANARY_8c1f"
	h := start(t, "", canary+"=host-secret-value")
	_, hostPort, _ := net.SplitHostPort(strings.TrimPrefix(h.base, "http://"))
	marker := fmt.Sprintf("hostile-%d", time.Now().UnixNano())

	cases := []struct {
		name    string
		code    string
		timeout int64
		check   func(t *testing.T, p proc)
	}{
		{"connect to the host's port and a listener", fmt.Sprintf(`
import socket
res = {}
for port in (%s, %d):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1); res[str(port)] = "connected"
    except OSError as e:
        res[str(port)] = type(e).__name__
cyrnel.output(res)`, hostPort, ln.Addr().(*net.TCPAddr).Port), 10000, func(t *testing.T, p proc) {
			for port, r := range p.Output {
				if r == "connected" {
					t.Errorf("connected to %s", port)
				}
			}
		}},
		{"reach the internet", `
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1); print("connected")
except OSError as e:
    print("refused", type(e).__name__)`, 10000, func(t *testing.T, p proc) {
			if !strings.HasPrefix(p.Stdout, "refused") {
				t.Errorf("stdout %q", p.Stdout)
			}
		}},
		{"list the data directory", fmt.Sprintf(`
import os
try:
    print(os.listdir(%q))
except OSError as e:
    print("denied", type(e).__name__)`, h.dataDir), 10000, func(t *testing.T, p proc) {
			if !strings.HasPrefix(p.Stdout, "denied") {
				t.Errorf("stdout %q", p.Stdout)
			}
		}},
		{"read every /proc/*/environ", `
import os
found = []
for pid in os.listdir("/proc"):
    try:
        if b"host-secret" in open(f"/proc/{pid}/environ", "rb").read(): found.append(pid)
    except OSError:
        pass
import os as o
cyrnel.output({"found": found, "env": [k for k in o.environ if "CANARY" in k], "pids": len([p for p in os.listdir("/proc") if p.isdigit()])})`, 10000, func(t *testing.T, p proc) {
			if len(p.Output["found"].([]any)) != 0 || len(p.Output["env"].([]any)) != 0 {
				t.Errorf("host environment visible: %v", p.Output)
			}
			if n := p.Output["pids"].(float64); n > 5 {
				t.Errorf("sees %v processes: not only its own tree", n)
			}
		}},
		{"kill the host", fmt.Sprintf(`
import os, signal
try:
    os.kill(%d, signal.SIGKILL); print("sent")
except OSError as e:
    print("denied", type(e).__name__)`, h.cmd.Process.Pid), 10000, func(t *testing.T, p proc) {
			if !strings.HasPrefix(p.Stdout, "denied") {
				t.Errorf("stdout %q", p.Stdout)
			}
		}},
		{"fork until refused", `
import os
n = 0
try:
    while True:
        if os.fork() == 0:
            import time; time.sleep(60); os._exit(0)
        n += 1
except OSError as e:
    print("refused after", n)`, 20000, func(t *testing.T, p proc) {
			if !strings.HasPrefix(p.Stdout, "refused after") {
				t.Errorf("stdout %q %+v", p.Stdout, p)
			}
		}},
		{"allocate until refused", `
blocks = []
while True:
    blocks.append(bytearray(64 << 20))`, 20000, func(t *testing.T, p proc) {
			if p.exit() != "failed" || p.reason() != "memory_limit" {
				t.Errorf("got %s/%s: %s", p.exit(), p.reason(), p.Error)
			}
		}},
		{"print forever", `
while True:
    print("spam" * 100)`, 20000, func(t *testing.T, p proc) {
			if p.exit() != "failed" || p.reason() != "output_limit" || !p.StdoutTruncated {
				t.Errorf("got %s/%s truncated=%v", p.exit(), p.reason(), p.StdoutTruncated)
			}
		}},
		{"setsid sleepers, then time out", fmt.Sprintf(`
import os, subprocess, time
for _ in range(3):
    subprocess.Popen(["/bin/sh", "-c", "sleep 300 # %s"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 301 # %s"])
    os._exit(0)
print("spawned", flush=True)
while True:
    time.sleep(1)`, marker, marker), 1500, func(t *testing.T, p proc) {
			if p.exit() != "timeout" || p.Stdout != "spawned\n" {
				t.Errorf("got %s %q", p.exit(), p.Stdout)
			}
		}},
		{"write a file for the next program", `
open("left-behind.txt", "w").write("x")
open("/tmp/left-behind.txt", "w").write("x")
import sys
sys.modules["json"].leaked = True`, 10000, func(t *testing.T, p proc) {
			if p.exit() != "success" {
				t.Errorf("%+v", p)
			}
		}},
		{"look for what the previous program left", `
import os, json
cyrnel.output({"files": [f for f in ("left-behind.txt", "/tmp/left-behind.txt") if os.path.exists(f)], "attr": hasattr(json, "leaked")})`, 10000, func(t *testing.T, p proc) {
			if len(p.Output["files"].([]any)) != 0 || p.Output["attr"] != false {
				t.Errorf("leaked between executions: %v", p.Output)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := h.run(c.code, map[string]any{"timeoutMs": c.timeout})
			c.check(t, p)
			var health struct {
				Status string `json:"status"`
			}
			if st, _ := h.do("GET", "/health", nil, &health); st != 200 || health.Status != "ok" {
				t.Fatalf("host unhealthy after: %d", st)
			}
			if next := h.run("print('next')", nil); next.exit() != "success" || next.Stdout != "next\n" {
				t.Fatalf("next program: %+v", next)
			}
		})
	}
	if s := strays(marker); len(s) > 0 {
		t.Fatalf("processes left on the machine: %v", s)
	}
	select {
	case <-accepted:
		t.Fatal("a program reached the host-side listener")
	default:
	}
}
