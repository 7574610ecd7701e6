package peer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/openapi/client"
)

// hosts: B is at addr; any other host has no address.
type hosts struct{ addr string }

func (hosts) Self() string { return "A" }

func (h hosts) Address(_ context.Context, id string) (string, error) {
	if id != "B" || h.addr == "" {
		return "", errors.New("no live lease")
	}
	return h.addr, nil
}

func TestBaseURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"10.0.0.7:9371":            "http://10.0.0.7:9371",
		"http://b.internal:9371":   "http://b.internal:9371",
		"https://b.example/cyrnel": "https://b.example/cyrnel",
	} {
		if u, err := BaseURL(addr); err != nil || u.String() != want {
			t.Errorf("BaseURL(%q) = %v %v, want %s", addr, u, err, want)
		}
	}
	for _, addr := range []string{"ftp://b.example", "http://", "https:///x"} {
		if u, err := BaseURL(addr); err == nil {
			t.Errorf("BaseURL(%q) = %v, want an error", addr, u)
		}
	}
}

// A run sent to B carries the caller's Authorization (never another), the
// forwarded mark and the run; B's refusal comes back as B's answer, and a
// host that cannot be reached is ErrUnreachable.
func TestCreateProcess(t *testing.T) {
	t.Parallel()
	type got struct {
		auth, by string
		body     map[string]any
	}
	seen := make(chan got, 1)
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g got
		g.auth, g.by = r.Header.Get("Authorization"), r.Header.Get(ForwardedHeader)
		json.NewDecoder(r.Body).Decode(&g.body)
		seen <- g
		w.Header().Set("Content-Type", "application/json")
		if g.body["session"] == "gone" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"status":409,"title":"Conflict","detail":"session gone has ended"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"pid":7,"state":"queued"}`))
	}))
	defer b.Close()
	c := NewClient(hosts{strings.TrimPrefix(b.URL, "http://")})
	ctx := context.Background()

	pid, err := c.CreateProcess(ctx, "B", "Bearer k1", process.CreateInput{Code: "print(1)", Ref: "mcp", Autorun: true, Session: "s1", TimeoutMs: 5000})
	if err != nil || pid != 7 {
		t.Fatalf("CreateProcess: %d %v", pid, err)
	}
	g := <-seen
	if g.auth != "Bearer k1" || g.by != "A" || g.body["code"] != "print(1)" || g.body["session"] != "s1" || g.body["ref"] != "mcp" || g.body["timeoutMs"] != 5000.0 || g.body["autorun"] != true {
		t.Fatalf("B received %+v", g)
	}

	_, err = c.CreateProcess(ctx, "B", "Bearer k1", process.CreateInput{Code: "1", Autorun: true, Session: "gone"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusConflict || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "has ended") {
		t.Fatalf("B's 409: %v", err)
	}
	<-seen

	if _, err := c.CreateProcess(ctx, "C", "Bearer k1", process.CreateInput{Code: "1", Session: "s9"}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a host without an address: %v", err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	gone := NewClient(hosts{strings.TrimPrefix(dead.URL, "http://")})
	if err := gone.EndSession(ctx, "B", "Bearer k1", "s1"); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a host that refuses connections: %v", err)
	}
}
