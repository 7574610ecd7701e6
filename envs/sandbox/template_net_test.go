package sandbox

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// probeConnectCode connects to a TCP address and sends it a marker.
const probeConnectCode = `
import socket
try:
    with socket.create_connection(("127.0.0.1", %d), timeout=5) as s:
        s.sendall(%q.encode())
    print("connected")
except OSError as e:
    print(type(e).__name__, e.errno)
`

// A forked child with the network reaches a listener on the host's
// loopback (the template then keeps the host's network namespace, or its
// children would share its empty one); the control, a child without the
// network, cannot.
func TestTemplateChildWithNetworkReachesHost(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	py := needPython(t)
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			spec := testTemplateSpec(t, py, Limits{}, nil)
			spec.Network = network
			marker := newMarker()
			out := strings.TrimSpace(fork(t, startTemplateSpec(t, spec)).output(t, fmt.Sprintf(probeConnectCode, ln.Addr().(*net.TCPAddr).Port, marker)))
			if !network {
				if out == "connected" {
					t.Errorf("a child without the network connected to the host's loopback")
				}
				return
			}
			if out != "connected" {
				t.Fatalf("a child with the network cannot reach the host's loopback: %s", out)
			}
			if m := <-got; m != marker {
				t.Errorf("the listener got %q, want the child's marker %q", m, marker)
			}
		})
	}
}
