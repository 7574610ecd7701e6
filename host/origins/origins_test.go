package origins

import (
	"net"
	"testing"
)

func TestAllowed(t *testing.T) {
	t.Parallel()
	a := New([]string{"cyrnel.internal", "https://Agents.Example:8443/x", "10.0.0.7:9371", " "})
	a.Listening(&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 9371})
	for host, want := range map[string]bool{
		"localhost:9371": true, "127.0.0.1": true, "[::1]:9371": true, "192.0.2.1:9371": true,
		"cyrnel.internal": true, "CYRNEL.INTERNAL.:80": true, "agents.example": true, "10.0.0.7": true,
		"evil.example": false, "": false, "192.0.2.2:9371": false, "localhost.evil.example": false,
	} {
		if got := a.Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
	for origin, want := range map[string]bool{
		"": true, "http://localhost:3000": true, "https://agents.example:8443": true,
		"http://evil.example": false, "null": false, "http://127.0.0.1.evil.example": false, "::": false,
	} {
		if got := a.Origin(origin); got != want {
			t.Errorf("Origin(%q) = %v, want %v", origin, got, want)
		}
	}
	if any := New([]string{Any}); !any.Host("evil.example") || !any.Origin("null") {
		t.Error("* does not allow any name")
	}
}

func TestListeningOnEveryAddress(t *testing.T) {
	t.Parallel()
	a := New(nil)
	a.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 9371})
	addrs, err := net.InterfaceAddrs()
	if err != nil || len(addrs) == 0 {
		t.Fatalf("interface addresses: %v", err)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok && !a.Host(net.JoinHostPort(n.IP.String(), "9371")) {
			t.Errorf("listening on 0.0.0.0, %s is refused", n.IP)
		}
	}
	if a.Host("evil.example") {
		t.Error("control: a foreign name is allowed")
	}
}
