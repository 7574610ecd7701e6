// Command cyrnel is the cyrnel host: serve the API, print its spec, report
// its version. This file is wiring only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cyrnel/cyrnel/cmd/cyrnel/internal/cli"
	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/envs/typescript"
	"github.com/cyrnel/cyrnel/host/api"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/server"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/tracing"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `cyrnel: a self-hosted code-execution host for AI agents

Usage:
  cyrnel serve [flags]      run the HTTP API server
  cyrnel run [flags] FILE   run a program (FILE.py, FILE.ts, or - for stdin), streaming its output
  cyrnel services ...       add, list or remove services (cyrnel services --help)
  cyrnel tools [QUERY]      list or search the tools programs can call
  cyrnel approvals ...      list, approve or deny the approvals tool calls wait on
  cyrnel keys ...           create, list or revoke API keys (cyrnel keys --help)
  cyrnel openapi [flags]    print the OpenAPI spec
  cyrnel version            print the version

Run 'cyrnel COMMAND --help' for a command's flags.
`

func main() {
	sandbox.MaybeRun()            // the sandbox re-executes this binary as its helper
	typescript.MaybeServeWorker() // and as the TypeScript environment's worker
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "openapi":
		err = printSpec(os.Stdout, os.Args[2:])
	case "run":
		os.Exit(cli.Run(os.Args[2:], version))
	case "services":
		err = cli.Services(os.Args[2:], version)
	case "tools":
		err = cli.Tools(os.Args[2:], version)
	case "approvals":
		err = cli.Approvals(os.Args[2:], version)
	case "keys":
		err = cli.Keys(os.Args[2:], version)
	case "version", "--version":
		fmt.Println(version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "cyrnel: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, cli.ErrUsage) {
		os.Exit(2) // already reported, with the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyrnel:", err)
		os.Exit(1)
	}
}

const serveHelp = `
Environment variables (a flag, when given, wins over its variable):
  CYRNEL_ADDR          listen address (default 127.0.0.1:9371)
  CYRNEL_DATA_DIR      data directory (default ./cyrnel-data)
  CYRNEL_DB_URL        database: empty for SQLite in the data directory, or postgres://…
  CYRNEL_API_KEY       require "Authorization: Bearer <key>" on every route but /health and the spec
                       (default: a key the server makes in DATA_DIR/api-key, mode 0600)
  CYRNEL_PYTHON        the Python interpreters module configs may name, ':'-separated; the first is the
                       default (as --python; default python3 on PATH)
  CYRNEL_ALLOW_UNSANDBOXED=1
                       let module configs weaken the sandbox (as --allow-unsandboxed)
  CYRNEL_MAX_SESSIONS  sessions this host runs at once (as --max-sessions, default 16)
  CYRNEL_SANDBOX_UIDS  FIRST:COUNT host uids a root host gives its sandboxes, one per live sandbox
                       (as --sandbox-uids, default 1879048192:65536); hosts on one machine coordinate
                       through /run/cyrnel-sandbox-ids.lock
  CYRNEL_SECRETS_KEY   base64 32-byte key sealing secrets at rest (default: a key file in the data directory;
                       required, the same on every host, with PostgreSQL)
  CYRNEL_SECRETS_KEY_FILE
                       a file holding CYRNEL_SECRETS_KEY
  CYRNEL_ADVERTISE_ADDR
                       with PostgreSQL: where the other hosts reach this one (as --advertise-addr; default the
                       bound listen address, which must then be one they can reach)
  CYRNEL_LEASE_TTL     with PostgreSQL: how long a host that stopped renewing its lease is trusted before
                       another host finishes its executions as host_lost (default 15s; renewed every third)
  CYRNEL_PROCESS_MAX_AGE
                       finished processes older than this are deleted with their files (default 720h; -1s: no bound)
  CYRNEL_PROCESS_MAX_MB
                       finished processes past the newest this many MiB are deleted (default 1024; -1: no bound)
  CYRNEL_PACKAGE_INDEX a PEP 503 simple index for the Python config's packages (as --package-index; wheels only)
  CYRNEL_PACKAGE_HOSTS the origins, comma-separated, the index may link wheels at besides its own (as --package-host);
                       pip and the host reach the index's origin and these only
  CYRNEL_FIND_LINKS    a directory of wheels for the Python config's packages (as --find-links)
  CYRNEL_LOG_LEVEL     debug, info, warn or error (default info)
  CYRNEL_LOG_FORMAT    text or json (as --log-format, default text)
  CYRNEL_METRICS_ADDR  serve GET /metrics without authentication on this address too (as --metrics-addr)
  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_*
                       OpenTelemetry tracing, off unless one of the first two is set (docs/operating.md)
`

// serveFlags are serve's flags. Most are read with cli.Setting, which
// falls back to the environment variable each names.
type serveFlags struct {
	fs           *flag.FlagSet
	pythons      cli.Strings
	packageHosts cli.Strings
	insecure     *bool
	unsandboxed  *bool
}

func newServeFlags() *serveFlags {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.String("addr", "", "listen address (env CYRNEL_ADDR, default 127.0.0.1:9371)")
	fs.String("data-dir", "", "data directory (env CYRNEL_DATA_DIR, default ./cyrnel-data)")
	fs.String("db-url", "", "database URL (env CYRNEL_DB_URL, default SQLite in the data directory)")
	fs.String("log-level", "", "log level (env CYRNEL_LOG_LEVEL, default info)")
	fs.Var(&f.pythons, "python", "a Python interpreter module configs may name, a name on PATH or a path; repeatable, the first is the default; no other runs (env CYRNEL_PYTHON, ':'-separated; default python3)")
	fs.String("log-format", "", "log format: text or json lines (env CYRNEL_LOG_FORMAT, default text)")
	fs.String("metrics-addr", "", "also serve GET /metrics, without authentication, on this address (env CYRNEL_METRICS_ADDR)")
	fs.String("package-index", "", "a PEP 503 simple index the Python environment's declared packages (config packages) are fetched from, wheels only (env CYRNEL_PACKAGE_INDEX)")
	fs.Var(&f.packageHosts, "package-host", "an origin (https://files.example.org, http://10.0.0.5:8080) the package index may link wheels at besides its own; repeatable; a build reaches the index's origin and these only (env CYRNEL_PACKAGE_HOSTS, comma-separated)")
	fs.String("find-links", "", "a directory of wheels the Python environment's declared packages come from instead of an index (env CYRNEL_FIND_LINKS)")
	fs.String("max-sessions", "", "sessions (long-lived interpreters) this host runs at once; more are refused with 429 (env CYRNEL_MAX_SESSIONS, default 16)")
	fs.String("allowed-hosts", "", "comma-separated host names (or addresses) requests may name in Host and a browser's Origin, besides the loopback names and the listen address's; * allows any (env CYRNEL_ALLOWED_HOSTS)")
	fs.String("advertise-addr", "", "with PostgreSQL: the address (host:port or an http(s) URL) the other hosts reach this one at, to forward requests for its sessions (env CYRNEL_ADVERTISE_ADDR, default the bound listen address)")
	f.insecure = fs.Bool("insecure", false, "allow listening on a non-loopback address without CYRNEL_API_KEY")
	fs.String("sandbox-uids", "", "FIRST:COUNT host uids (and gids) a root host gives its sandboxes, one each (env CYRNEL_SANDBOX_UIDS, default "+
		fmt.Sprintf("%d:%d", sandbox.DefaultIDRange.First, sandbox.DefaultIDRange.Count)+")")
	f.unsandboxed = fs.Bool("allow-unsandboxed", false, "let module configs turn the sandbox or any of its layers off (env CYRNEL_ALLOW_UNSANDBOXED=1); also what a machine lacking a layer needs")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cyrnel serve [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), serveHelp)
	}
	f.fs = fs
	return f
}

func serve(args []string) error {
	f := newServeFlags()
	if err := cli.Parse(f.fs, args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", f.fs.Args())
	}
	log, err := cli.NewLogger(cli.Setting(f.fs, "log-level", "CYRNEL_LOG_LEVEL", "info"), cli.Setting(f.fs, "log-format", "CYRNEL_LOG_FORMAT", "text"))
	if err != nil {
		return err
	}
	cfg, err := serveConfig(f)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Tracing, err = tracing.FromEnv(ctx, version); err != nil {
		return err
	}
	// The server owns the tracing provider from here: it shuts it down
	// when New fails and when it stops.
	srv, err := server.New(ctx, log, cfg)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, nil)
}

// serveConfig is the server's config from serve's flags and the
// environment.
func serveConfig(f *serveFlags) (server.Config, error) {
	fs := f.fs
	secretsKey, err := secretsKeyFromEnv()
	if err != nil {
		return server.Config{}, err
	}
	leaseTTL, err := leaseTTLFromEnv()
	if err != nil {
		return server.Config{}, err
	}
	gov, err := governanceFromEnv()
	if err != nil {
		return server.Config{}, err
	}
	if err := cli.SetSandboxUIDs(cli.Setting(fs, "sandbox-uids", "CYRNEL_SANDBOX_UIDS", "")); err != nil {
		return server.Config{}, err
	}
	maxSessions, err := strconv.Atoi(cli.Setting(fs, "max-sessions", "CYRNEL_MAX_SESSIONS", "16"))
	if err != nil || maxSessions < 1 {
		return server.Config{}, fmt.Errorf("--max-sessions (CYRNEL_MAX_SESSIONS): want a positive number")
	}
	limits := process.DefaultLimits()
	if limits.Keep, err = retentionFromEnv(limits.Keep); err != nil {
		return server.Config{}, err
	}
	packageHosts := f.packageHosts
	if len(packageHosts) == 0 {
		packageHosts = splitList(os.Getenv("CYRNEL_PACKAGE_HOSTS"))
	}
	return server.Config{
		Sessions:         session.Config{MaxSessions: maxSessions},
		Governance:       gov,
		Addr:             cli.Setting(fs, "addr", "CYRNEL_ADDR", "127.0.0.1:9371"),
		DataDir:          cli.Setting(fs, "data-dir", "CYRNEL_DATA_DIR", "./cyrnel-data"),
		DBURL:            cli.Setting(fs, "db-url", "CYRNEL_DB_URL", ""),
		APIKey:           os.Getenv("CYRNEL_API_KEY"),
		SecretsKey:       secretsKey,
		LeaseTTL:         leaseTTL,
		Python:           cli.Interpreters(f.pythons),
		PackageIndex:     cli.Setting(fs, "package-index", "CYRNEL_PACKAGE_INDEX", ""),
		FindLinks:        cli.Setting(fs, "find-links", "CYRNEL_FIND_LINKS", ""),
		PackageHosts:     packageHosts,
		Insecure:         *f.insecure,
		AdvertiseAddr:    cli.Setting(fs, "advertise-addr", "CYRNEL_ADVERTISE_ADDR", ""),
		AllowedHosts:     splitList(cli.Setting(fs, "allowed-hosts", "CYRNEL_ALLOWED_HOSTS", "")),
		AllowUnsandboxed: *f.unsandboxed || os.Getenv("CYRNEL_ALLOW_UNSANDBOXED") == "1",
		Version:          version,
		Limits:           limits,
		Announce:         true,
		AdaptProcs:       true,
		MetricsAddr:      cli.Setting(fs, "metrics-addr", "CYRNEL_METRICS_ADDR", ""),
	}, nil
}

// secretsKeyFromEnv is CYRNEL_SECRETS_KEY, or the content of the file
// CYRNEL_SECRETS_KEY_FILE names.
func secretsKeyFromEnv() (string, error) {
	secretsKey := os.Getenv("CYRNEL_SECRETS_KEY")
	if f := os.Getenv("CYRNEL_SECRETS_KEY_FILE"); f != "" && secretsKey == "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("CYRNEL_SECRETS_KEY_FILE: %w", err)
		}
		secretsKey = strings.TrimSpace(string(b))
	}
	return secretsKey, nil
}

// leaseTTLFromEnv is CYRNEL_LEASE_TTL (0: the cluster's default).
func leaseTTLFromEnv() (time.Duration, error) {
	v := os.Getenv("CYRNEL_LEASE_TTL")
	if v == "" {
		return 0, nil
	}
	leaseTTL, err := time.ParseDuration(v)
	if err != nil || leaseTTL < time.Second {
		return 0, fmt.Errorf("CYRNEL_LEASE_TTL: want a duration of at least 1s, got %q", v)
	}
	return leaseTTL, nil
}

func printSpec(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("openapi", flag.ContinueOnError)
	format := fs.String("format", "json", "json or yaml")
	v30 := fs.Bool("3.0", false, "print the OpenAPI 3.0 rendering (for generators that need it)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	b, err := api.Spec(strings.ToLower(*format), *v30)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// retentionFromEnv reads the bounds on finished processes kept.
func retentionFromEnv(keep process.Retention) (process.Retention, error) {
	if v := os.Getenv("CYRNEL_PROCESS_MAX_AGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return keep, fmt.Errorf("CYRNEL_PROCESS_MAX_AGE: %w", err)
		}
		keep.MaxAge = d
	}
	if v := os.Getenv("CYRNEL_PROCESS_MAX_MB"); v != "" {
		mb, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return keep, fmt.Errorf("CYRNEL_PROCESS_MAX_MB: %w", err)
		}
		keep.MaxBytes = mb << 20
	}
	return keep, nil
}

// splitList is a comma-separated setting's non-empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// governanceFromEnv reads the tool governance settings.
func governanceFromEnv() (server.Governance, error) {
	var g server.Governance
	g.DefaultPolicy = policy.Decision(os.Getenv("CYRNEL_TOOL_POLICY_DEFAULT"))
	if g.DefaultPolicy != "" && !g.DefaultPolicy.Valid() {
		return g, fmt.Errorf("CYRNEL_TOOL_POLICY_DEFAULT=%q: want allow, ask or block", g.DefaultPolicy)
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"CYRNEL_APPROVAL_TTL", &g.Approvals.TTL}, {"CYRNEL_APPROVAL_MAX_AGE", &g.Approvals.MaxAge}, {"CYRNEL_AUDIT_MAX_AGE", &g.Audit.MaxAge}, {"CYRNEL_CHANGES_MAX_AGE", &g.Changes.MaxAge}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil {
				return g, fmt.Errorf("%s: %w", d.env, err)
			}
			*d.to = x
		}
	}
	for _, c := range []struct {
		env string
		to  *int64
	}{{"CYRNEL_APPROVAL_MAX_RECORDS", &g.Approvals.MaxRecords}, {"CYRNEL_AUDIT_MAX_RECORDS", &g.Audit.MaxRecords}, {"CYRNEL_CHANGES_MAX_RECORDS", &g.Changes.MaxRecords}} {
		if v := os.Getenv(c.env); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return g, fmt.Errorf("%s: %w", c.env, err)
			}
			*c.to = n
		}
	}
	return g, nil
}
