package tests

import (
	"fmt"

	"github.com/cyrnel/cyrnel/host/pgtest"

	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// TestPostgresBackedHost runs a host on PostgreSQL (the scale-out option)
// when CYRNEL_TEST_POSTGRES_URL names a database (`make test` provides one
// where it can install PostgreSQL).
func TestPostgresBackedHost(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	h := start(t, "", "CYRNEL_DB_URL="+pgtest.Schema(t, url), "CYRNEL_SECRETS_KEY="+newSecretsKey(t))
	p := h.run("print('on postgres')\ncyrnel.output({'ok': True})", nil)
	if p.exit() != "success" || p.Stdout != "on postgres\n" || p.Output["ok"] != true {
		t.Fatalf("%+v", p)
	}
	if st, _ := h.do("POST", "/services", map[string]any{"id": "pg_pets", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "petstore-3.0.yaml")}}, nil); st != 201 && st != 409 {
		t.Fatalf("import on postgres: %d", st)
	}
	var got proc
	h.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &got)
	if got.exit() != "success" {
		t.Fatalf("read back: %+v", got)
	}
	// NUL, which PostgreSQL text refuses: in output it becomes U+FFFD, in
	// code it is a 422.
	nul := h.run("print('a\\0b')\nraise ValueError('x\\0y')", nil)
	h.do("GET", fmt.Sprintf("/processes/%d", nul.PID), nil, &got)
	if got.State != "idle" || got.exit() != "failed" || got.Stdout != "a\uFFFDb\n" || got.Error != "ValueError: x\uFFFDy" {
		t.Fatalf("NUL in output: %+v", got)
	}
	var prob problem
	if st, _ := h.do("POST", "/processes", map[string]any{"code": "x = 1\x00"}, &prob); st != 422 || prob.Errors[0].Location != "body.code" {
		t.Fatalf("NUL in code: %d %+v", st, prob)
	}
}
