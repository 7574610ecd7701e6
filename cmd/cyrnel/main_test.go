package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/cmd/cyrnel/internal/cli"
	"github.com/cyrnel/cyrnel/host/api"
)

// TestPrintSpec prints the spec the API serves, as JSON or YAML, 3.1 or
// 3.0; an unknown format or flag is an error, not an empty spec.
func TestPrintSpec(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, `"openapi": "3.1.0"`}, {[]string{"--3.0"}, `"openapi": "3.0.3"`}, {[]string{"--format", "YAML"}, "openapi: 3.1.0"},
	} {
		var b bytes.Buffer
		if err := printSpec(&b, c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%q: spec lacks %s", c.args, c.want)
		}
	}
	var b bytes.Buffer
	if err := printSpec(&b, nil); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil || doc["info"].(map[string]any)["version"] != api.SpecVersion {
		t.Errorf("json spec: %v, info %v", err, doc["info"])
	}
	if err := printSpec(&b, []string{"--format", "toml"}); err == nil || !strings.Contains(err.Error(), "want json or yaml") {
		t.Errorf("toml: %v", err)
	}
	if err := printSpec(&b, []string{"--yaml"}); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("unknown flag: %v", err)
	}
}

// TestServeRefusesBadCommandLinesBeforeStarting: arguments, unknown flags
// and a bad log level (flag or variable) fail before any server is made.
func TestServeRefusesBadCommandLinesBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args  []string
		level string
		want  string
	}{
		{[]string{"--data-dir", dir, "extra"}, "", "serve takes no arguments"},
		{[]string{"--data-dir", dir, "--nope"}, "", "usage error"},
		{[]string{"--data-dir", dir, "--log-level", "loud"}, "", `log level "loud"`},
		{[]string{"--data-dir", dir}, "shouty", `log level "shouty"`},
		{[]string{"--data-dir", dir, "--log-level", "loud"}, "info", `log level "loud"`}, // the flag wins
	} {
		t.Setenv("CYRNEL_LOG_LEVEL", c.level)
		if err := serve(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q (CYRNEL_LOG_LEVEL=%q): err %v, want %q", c.args, c.level, err, c.want)
		}
	}
}
