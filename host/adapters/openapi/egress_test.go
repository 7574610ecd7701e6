package openapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/egress"
)

// TestToolCallsStayOffPrivateNetworks: without allowPrivateNetwork a tool
// call reaches no loopback or link-local address, whether named by IP or by
// a name that resolves to one; the same call with the flag goes through
// (the control that shows the refusal is the guard's doing).
func TestToolCallsStayOffPrivateNetworks(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	port := rec.URL[strings.LastIndex(rec.URL, ":"):]
	for _, base := range []string{rec.URL, "http://localhost" + port, "http://169.254.169.254", "http://[::1]" + port, "http://10.0.0.1"} {
		hydrate(t, a, "pets", def, map[string]any{"serverUrl": base, "allowPrivateNetwork": false}, nil)
		if _, err := call(t, a, def, "pets", "listPets", nil); !errors.Is(err, egress.ErrPrivate) {
			t.Errorf("%s: %v, want the private-network refusal", base, err)
		}
	}
	select {
	case req := <-rec.reqs:
		t.Fatalf("the loopback upstream was reached: %+v", req)
	default:
	}
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": rec.URL, "allowPrivateNetwork": true}, nil)
	mustCall(t, a, def, "pets", "listPets", nil)
	rec.last(t)
}

// TestHostsOwnAddressIsNeverReached: the host's own listen address is
// refused even with allowPrivateNetwork, on the first hop and on a redirect.
func TestHostsOwnAddressIsNeverReached(t *testing.T) {
	t.Parallel()
	own := newRecorder(t, nil)
	guard := &egress.Guard{}
	if err := guard.AddOwn(own.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	redirect := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, own.URL+"/processes/1/code", http.StatusFound)
	})
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{Guard: guard})
	port := own.URL[strings.LastIndex(own.URL, ":"):]
	for _, base := range []string{own.URL, "http://localhost" + port} {
		hydrate(t, a, "pets", def, map[string]any{"serverUrl": base}, nil)
		if _, err := call(t, a, def, "pets", "listPets", nil); !errors.Is(err, egress.ErrOwn) {
			t.Errorf("%s: %v, want the own-address refusal", base, err)
		}
	}
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": redirect.URL}, nil)
	if _, err := call(t, a, def, "pets", "listPets", nil); !errors.Is(err, egress.ErrOwn) {
		t.Errorf("redirect to the host: %v, want the own-address refusal", err)
	}
	redirect.last(t)
	select {
	case req := <-own.reqs:
		t.Fatalf("the host's own address was reached: %+v", req)
	default:
	}
	// Control: the same redirect is followed where the guard does not know
	// the address as the host's.
	b := New(Options{})
	hydrate(t, b, "pets", def, map[string]any{"serverUrl": redirect.URL}, nil)
	mustCall(t, b, def, "pets", "listPets", nil)
	redirect.last(t)
	own.last(t)
}

// TestDocumentFetchFollowsTheServiceRule: a document on loopback is fetched
// only when the service's config allows private networks.
func TestDocumentFetchFollowsTheServiceRule(t *testing.T) {
	t.Parallel()
	doc := readFixture(t, "petstore-3.0.yaml")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
	defer srv.Close()
	a := New(Options{})
	if _, err := a.Definition(context.Background(), adapters.Source{URL: srv.URL + "/p.yaml"}); !errors.Is(err, egress.ErrPrivate) {
		t.Errorf("without the flag: %v", err)
	}
	if _, err := a.Definition(context.Background(), adapters.Source{URL: srv.URL + "/p.yaml", Config: privateOK}); err != nil {
		t.Errorf("with the flag: %v", err)
	}
}
