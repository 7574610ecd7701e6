// Package server assembles the host: storage, secrets, modules, processes
// and the HTTP API, and runs them until told to stop.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/python"
	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/envs/typescript"
	"github.com/cyrnel/cyrnel/envs/worker"
	"github.com/cyrnel/cyrnel/host/adapter"
	"github.com/cyrnel/cyrnel/host/adapters/openapi"
	"github.com/cyrnel/cyrnel/host/api"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/cluster"
	"github.com/cyrnel/cyrnel/host/console"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/datadir"
	"github.com/cyrnel/cyrnel/host/egress"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/mcp"
	"github.com/cyrnel/cyrnel/host/metrics"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/origins"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
	"github.com/cyrnel/cyrnel/host/tracing"
)

// Config is the server's configuration (DESIGN §7).
type Config struct {
	Addr       string
	DataDir    string
	DBURL      string
	APIKey     string
	SecretsKey string
	// LeaseTTL, on PostgreSQL, is how long this host's lease lasts unless
	// renewed (0: cluster.DefaultTTL).
	LeaseTTL time.Duration
	// Insecure allows listening beyond loopback without an API key.
	Insecure        bool
	Version         string
	ShutdownTimeout time.Duration
	Limits          process.Limits
	// Environment, when set, is activated instead of the stored choice, and
	// not stored (cyrnel run FILE.ts on an embedded host).
	Environment string
	// Policies may refuse configuration changes (e.g. sandbox relaxation
	// the operator did not allow at start-up); every change, through any
	// route, is checked by each.
	Policies []control.Policy
	// Python lists the interpreters the Python environment's config may
	// name (serve --python, repeatable); the first is the default. Empty:
	// python3 on PATH, if there is one.
	Python []string
	// PackageIndex (a PEP 503 simple index URL) or FindLinks (a directory
	// of wheels) is where the Python environment's declared packages come
	// from (serve --package-index, --find-links).
	PackageIndex, FindLinks string
	// AllowedHosts are host names (or addresses) requests may name in Host
	// and Origin besides the loopback names and the listen address's
	// (serve --allowed-hosts); "*" allows any.
	AllowedHosts []string
	// AdvertiseAddr, with PostgreSQL, is where the other hosts reach this
	// one (host:port or an http(s) URL; serve --advertise-addr): they
	// forward there the requests for its sessions. "": the bound listen
	// address.
	AdvertiseAddr string
	// AllowUnsandboxed lets module configs weaken the sandbox (serve
	// --allow-unsandboxed): the operator's decision, never an API call's.
	AllowUnsandboxed bool
	// Announce records the listen URL in the data directory, so the CLI's
	// commands on it send their work here (cyrnel serve; not the CLI's own
	// embedded hosts).
	Announce   bool
	Governance Governance
	// Sessions bounds the sessions this host runs.
	Sessions session.Config
	// MetricsAddr, when set, is a listener of its own serving GET /metrics
	// without authentication (serve --metrics-addr).
	MetricsAddr string
	// Tracing traces requests, executions and tool calls (nil: off); the
	// server shuts it down when it stops, and when New fails.
	Tracing *tracing.Provider

	// startHook, when set, runs before each start step and fails it by
	// returning an error (the lifecycle tests).
	startHook func(step string) error
}

// Governance configures tool policies, approvals and the audit (zero values
// take the defaults).
type Governance struct {
	// DefaultPolicy applies until the operator stores policies (allow).
	DefaultPolicy policy.Decision
	// Approvals: how long one waits for a decision, and how many decided
	// ones are kept, for how long.
	Approvals approval.Options
	Audit     audit.Options
	// Changes bounds the record of configuration changes (GET /changes;
	// defaults: the newest 10,000, a year).
	Changes retention.Bounds
}

// Server is an assembled host.
type Server struct {
	log *slog.Logger
	cfg Config
	// stack holds the started parts; stopping it, newest first, is the one
	// shutdown sequence (Serve's and Close's).
	stack       *lifecycle.Stack
	keyFile     string // the data directory's key file, when the key is from there
	dir         *datadir.Dir
	store       *store.Store
	box         *secrets.Box
	procs       *process.Manager
	sessions    *session.Manager
	audit       *audit.Writer
	policies    *policy.Engine
	approvals   *approval.Manager
	gate        *gate.Gate
	modules     *modules.Registry
	services    *services.Manager
	cluster     *cluster.Cluster // nil on SQLite
	handler     http.Handler
	hosts       *origins.Allowed
	hostSandbox modules.HostSandbox
	// egress learns the listen address, which tool calls never reach.
	egress  *egress.Guard
	keys    *keys.Manager
	changes *changes.Log
	mcp     *mcp.Handler
	metrics *metrics.Metrics
	tracing *tracing.Provider

	mu sync.Mutex
	// requestsDone is closed when Serve's listener has finished its
	// requests (nil: Serve is not serving).
	requestsDone chan struct{}
}

// ErrInsecure is returned when asked to listen beyond loopback unprotected.
var ErrInsecure = errors.New("refusing to listen on a non-loopback address without CYRNEL_API_KEY (pass --insecure to do it anyway)")

// CheckAddr refuses non-loopback addresses unless a key is set or insecure.
func CheckAddr(addr, apiKey string, insecure bool) error {
	if apiKey != "" || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return ErrInsecure
	}
	return nil
}

// New assembles a host: opens the database, finishes what a previous host
// left running, and activates the stored environment. Each long-lived part
// is started onto the server's stack as soon as it exists, so a failure at
// any step stops what already runs, newest first (see Lifecycle in
// docs/architecture.md).
func New(ctx context.Context, log *slog.Logger, cfg Config) (srv *Server, err error) {
	if cfg.Tracing == nil {
		cfg.Tracing = tracing.Off()
	}
	stack := lifecycle.New(log.With("component", "lifecycle"), cfg.startHook)
	defer func() {
		if err != nil {
			stack.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // already failing; Stop logs each
		}
	}()
	// The spans of the executions ended at shutdown go out before the host
	// does: tracing is stopped last.
	if err = stack.Start(ctx, "tracing", lifecycle.Func{OnStop: cfg.Tracing.Shutdown}); err != nil {
		return nil, err
	}
	if err = CheckAddr(cfg.Addr, cfg.APIKey, cfg.Insecure); err != nil {
		return nil, err
	}
	hostSandbox, err := modules.CheckHostSandbox(sandbox.Probe(), cfg.AllowUnsandboxed)
	if err != nil {
		return nil, err
	}
	if len(hostSandbox.Missing) > 0 {
		log.Warn("running without sandbox layers this machine lacks (--allow-unsandboxed)", "missing", hostSandbox.Missing)
	}
	s := &Server{log: log, stack: stack, tracing: cfg.Tracing, metrics: metrics.New(), hostSandbox: hostSandbox}
	if err = s.openStorage(ctx, &cfg); err != nil {
		return nil, err
	}
	if err = s.startGovernance(ctx, cfg); err != nil {
		return nil, err
	}
	if err = s.startRuntime(ctx, cfg); err != nil {
		return nil, err
	}
	s.cfg = cfg
	s.assembleHandler(cfg)
	return s, nil
}

// openStorage opens the data directory, the database, the secrets and, on
// PostgreSQL, joins the cluster.
func (s *Server) openStorage(ctx context.Context, cfg *Config) (err error) {
	if s.dir, err = datadir.Open(cfg.DataDir); err != nil {
		return err
	}
	if err = s.stack.Start(ctx, "data directory", closeErr(s.dir.Close)); err != nil {
		s.dir.Close()
		return err
	}
	var dbTracing trace.TracerProvider // nil: no span per statement
	if cfg.Tracing.Enabled {
		dbTracing = cfg.Tracing
	}
	if s.store, err = store.Open(ctx, cfg.DBURL, cfg.DataDir, store.Options{UsedDataDir: s.dir.Used, Log: s.log.With("component", "store"), Tracing: dbTracing}); err != nil {
		return err
	}
	if err = s.stack.Start(ctx, "store", closeErr(s.store.Close)); err != nil {
		s.store.Close()
		return err
	}
	if cfg.APIKey == "" {
		// Nobody else on the machine may use a server started on its
		// defaults: it makes a key only its operator can read (DESIGN §11).
		var created bool
		if cfg.APIKey, created, err = s.dir.APIKey(); err != nil {
			return err
		}
		s.keyFile = filepath.Join(cfg.DataDir, datadir.APIKeyFile)
		if created {
			s.log.Info("created an API key", "file", s.keyFile)
		}
	}
	if !s.store.Local() && cfg.SecretsKey == "" {
		// A key generated per data directory would differ between hosts,
		// each unable to open what the others sealed.
		return errors.New("with PostgreSQL every host must share one secrets key: set CYRNEL_SECRETS_KEY (or CYRNEL_SECRETS_KEY_FILE) to the same base64 32-byte key on each host")
	}
	if s.box, err = openSecrets(ctx, s.log, s.store, cfg.SecretsKey, cfg.DataDir); err != nil {
		return err
	}
	if s.store.Local() {
		return nil
	}
	if s.cluster, err = cluster.New(ctx, s.log.With("component", "cluster"), cfg.DBURL, s.dir.HostID, s.store, cluster.Options{TTL: cfg.LeaseTTL, Observer: s.metrics}); err != nil {
		return err
	}
	// cluster.New already renews the lease; the "cluster" step below stops
	// it in order on shutdown, this one on a failure before that step.
	if err = s.stack.Start(ctx, "cluster lease", lifecycle.Func{OnStop: s.cluster.Stop}); err != nil {
		s.cluster.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // already failing
		return err
	}
	return nil
}

// startGovernance starts the record of changes, the keys, policies,
// approvals and the audit.
func (s *Server) startGovernance(ctx context.Context, cfg Config) (err error) {
	// Every configuration change is recorded with the key that made it.
	s.changes = changes.New(s.log.With("component", "changes"), s.store, cfg.Governance.Changes)
	if err = s.stack.Start(ctx, "changes", lifecycle.Closer(s.changes.Close)); err != nil {
		s.changes.Close()
		return err
	}
	s.keys = keys.New(s.log.With("component", "keys"), s.store, s.changes, keys.Options{Bootstrap: cfg.APIKey, BootstrapSince: keySince(s.keyFile)})
	if err = s.stack.Start(ctx, "keys", lifecycle.Closer(s.keys.Close)); err != nil {
		s.keys.Close()
		return err
	}
	if s.policies, err = policy.Load(ctx, s.store, cfg.Governance.DefaultPolicy); err != nil {
		return err
	}
	s.policies.RecordTo(s.changes)
	if cl := s.cluster; cl != nil {
		s.policies.OnChange(func(ctx context.Context) { cl.Notify(ctx, control.Event{Kind: control.KindPolicies}) })
	}
	var relay approval.Relay // nil: one host
	if s.cluster != nil {
		relay = s.cluster
	}
	s.approvals = approval.New(s.log.With("component", "approvals"), s.store, relay, cfg.Governance.Approvals)
	if err = s.stack.Start(ctx, "approvals", lifecycle.Func{OnStart: s.approvals.Recover, OnStop: stopClose(s.approvals.Close)}); err != nil {
		s.approvals.Close()
		return err
	}
	s.audit = audit.New(s.log.With("component", "audit"), s.store, cfg.Governance.Audit)
	if err = s.stack.Start(ctx, "audit", lifecycle.Closer(s.audit.Close)); err != nil {
		s.audit.Close()
		return err
	}
	// In-flight requests may still write to the audit, approvals and keys:
	// Serve's shutdown of the listener is awaited here.
	return s.stack.Start(ctx, "requests", lifecycle.Func{OnStop: s.awaitRequests})
}

// startRuntime starts tools, environments, sessions and processes, and on
// PostgreSQL the cluster's handling of the other hosts.
func (s *Server) startRuntime(ctx context.Context, cfg Config) (err error) {
	interpreters, err := declarePython(s.log, cfg.Python)
	if err != nil {
		return err
	}
	machine, err := worker.ReadMachine()
	if err != nil {
		return err
	}
	var notifier control.Notifier
	if s.cluster != nil {
		notifier = s.cluster
	}
	// One control plane for modules and services: every configuration
	// change is applied one at a time, all or nothing; with several hosts
	// each stored change is announced to the others, which reload it.
	plane := control.New(s.log.With("component", "control"), notifier, cfg.Policies...)
	plane.RecordTo(s.changes)
	s.modules = modules.New(s.log.With("component", "modules"), s.store, s.box, plane, environments(s.log, cfg, interpreters))
	s.egress = &egress.Guard{}
	s.services = services.New(s.log.With("component", "services"), s.store, s.box, plane, map[string]adapter.Adapter{
		openapi.ID: openapi.New(openapi.Options{Guard: s.egress, WrapTransport: upstreamTracing(cfg.Tracing)}),
	})
	s.modules.AllowUnsandboxed(cfg.AllowUnsandboxed)
	s.modules.LimitTo(machine)
	for _, info := range s.services.Adapters() {
		s.modules.AddInfo(info)
	}
	if err = s.stack.Start(ctx, "services", s.services); err != nil {
		return err
	}
	// The environment is activated below, once processes can report; it
	// is stopped after them.
	if err = s.stack.Start(ctx, "modules", lifecycle.Func{OnStop: s.modules.Stop}); err != nil {
		return err
	}
	if cl := s.cluster; cl != nil {
		if err = s.stack.Start(ctx, "cluster", lifecycle.Func{OnStop: cl.Stop}); err != nil {
			return err
		}
	}
	s.sessions = session.New(s.log.With("component", "sessions"), s.store, s.modules, s.dir.HostID, cfg.Sessions)
	if err = s.stack.Start(ctx, "sessions", lifecycle.Func{OnStart: s.sessions.Recover, OnStop: s.sessions.Shutdown}); err != nil {
		return err
	}
	return s.startProcesses(ctx, cfg)
}

// startProcesses starts the process manager, activates the environment and
// serves MCP.
func (s *Server) startProcesses(ctx context.Context, cfg Config) (err error) {
	var tracer trace.Tracer // nil: the domain packages trace nothing
	if cfg.Tracing.Enabled {
		tracer = cfg.Tracing.Tracer("github.com/cyrnel/cyrnel")
	}
	s.procs = process.New(s.log.With("component", "processes"), s.store, s.modules, cfg.Limits, s.dir.HostID, 0, s.processParts(tracer))
	if err = s.stack.Start(ctx, "processes", lifecycle.Func{OnStart: s.procs.Recover, OnStop: s.stopProcesses}); err != nil {
		s.procs.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // already failing
		return err
	}
	s.gate = &gate.Gate{Policies: s.policies, Approvals: s.approvals, Audit: s.audit, Processes: s.procs, Tools: s.services, Observer: s.metrics, Tracer: tracer}
	activate := func(ctx context.Context) error {
		return s.modules.Start(ctx, &bindings{Manager: s.procs, tools: s.services, gate: s.gate}, cfg.Environment)
	}
	if err = s.stack.Start(ctx, "environment", lifecycle.Func{OnStart: activate}); err != nil {
		return err
	}
	if cl := s.cluster; cl != nil {
		handlers := clusterHandlers(s.store, s.procs, s.sessions, s.approvals, s.policies, s.modules, s.services)
		if err = s.stack.Start(ctx, "cluster handlers", lifecycle.Func{OnStart: func(context.Context) error { cl.Start(handlers); return nil }}); err != nil {
			return err
		}
	}
	s.mcp = mcp.New(mcp.Deps{Log: s.log.With("component", "mcp"), Version: cfg.Version, Processes: s.procs, Environments: s.modules, Tools: mcpTools{s.services, s.modules}, Sessions: s.sessions}, mcp.Options{})
	// MCP sessions hold event streams open: they end first, so the
	// listener's shutdown need not wait them out.
	return s.stack.Start(ctx, "mcp", lifecycle.Closer(s.mcp.Close))
}

// processParts are what the process manager works with: on PostgreSQL the
// cluster relays to the other hosts and their approvals are read back.
func (s *Server) processParts(tracer trace.Tracer) process.With {
	with := process.With{Instruments: process.Instruments{Observer: s.metrics, Tracer: tracer}, Sessions: s.sessions}
	if s.cluster != nil {
		with.Relay, with.Approvals = s.cluster, pendingApprovals{s.approvals}
	}
	return with
}

// stopProcesses ends running executions (canceled, host_shutdown). One of
// several hosts first gives them half the time left to finish, so a rolling
// deploy loses as little as it can.
func (s *Server) stopProcesses(ctx context.Context) error {
	if s.cluster != nil {
		if deadline, ok := ctx.Deadline(); ok {
			dctx, cancel := context.WithTimeout(ctx, time.Until(deadline)/2)
			s.procs.Drain(dctx)
			cancel()
		}
	}
	return s.procs.Shutdown(ctx)
}

// assembleHandler builds the HTTP API over the started parts.
func (s *Server) assembleHandler(cfg Config) {
	// Another host forwards to this one naming the advertised address.
	s.hosts = origins.New(append(cfg.AllowedHosts, cfg.AdvertiseAddr))
	var others api.Peers
	if s.cluster != nil {
		others = peers{s.store, s.dir.HostID}
	}
	s.metrics.Watch(gauges(s.procs, s.modules, s.sessions, s.approvals, s.services, s.cluster))
	handler, _ := api.New(api.Deps{Log: s.log, Version: cfg.Version, Keys: s.keys, Changes: s.changes, Processes: s.procs, Environment: s.modules, Modules: s.modules, Services: s.services, Tools: s.services, Sessions: s.sessions, MCP: s.mcp, Hosts: s.hosts, Peers: others,
		Policies: s.policies, Approvals: s.approvals, ToolCalls: toolCalls{s.audit, s.store}, Gate: s.gate, Ready: readiness{s.store, s.modules}, Sandbox: s.hostSandbox,
		Metrics: s.metrics.Handler(), Requests: s.metrics, Tracing: requestTracing(cfg.Tracing)})
	// The console's assets and the API reference sit in front of the API
	// (and its authentication): they hold no data.
	s.handler = console.Handler(handler)
}

// environments are the environments this host can activate.
func environments(log *slog.Logger, cfg Config, interpreters []python.Interpreter) map[string]modules.Factory {
	return map[string]modules.Factory{
		"python": func() module.Environment {
			return python.New(log, python.Options{Interpreters: interpreters, Packages: python.PackageSource{
				Index: cfg.PackageIndex, FindLinks: cfg.FindLinks, CacheDir: filepath.Join(cfg.DataDir, "packages"),
			}})
		},
		typescript.ID: func() module.Environment { return typescript.New(log) },
	}
}

// closeErr adapts a component that stops with Close() error.
func closeErr(close func() error) lifecycle.Component {
	return lifecycle.Func{OnStop: func(context.Context) error { return close() }}
}

// stopClose adapts a plain Close to a stop function.
func stopClose(close func()) func(context.Context) error {
	return func(context.Context) error { close(); return nil }
}

// awaitRequests waits, no longer than ctx allows, for Serve's listener to
// finish its requests (at once when Serve never ran).
func (s *Server) awaitRequests(ctx context.Context) error {
	s.mu.Lock()
	done := s.requestsDone
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keySince is when the bootstrap key was made, as GET /keys shows it: the
// key file's time when it is from the data directory, else now.
func keySince(keyFile string) time.Time {
	if keyFile != "" {
		if fi, err := os.Stat(keyFile); err == nil {
			return fi.ModTime().UTC()
		}
	}
	return time.Now().UTC()
}

// declarePython resolves the operator's interpreters (python3 on PATH when
// none is named: a machine without it can still run TypeScript).
func declarePython(log *slog.Logger, names []string) ([]python.Interpreter, error) {
	if len(names) > 0 {
		return python.Declare(names)
	}
	declared, err := python.Declare([]string{"python3"})
	if err != nil {
		log.Warn("no Python interpreter: the python environment cannot run (declare one with --python or CYRNEL_PYTHON)", "err", err)
		return nil, nil
	}
	return declared, nil
}

// Handler is the HTTP API with the console in front.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve listens on cfg.Addr until ctx ends, then shuts down: stop accepting,
// kill running executions (canceled, host_shutdown), tear environments down,
// close the database. ready, if not nil, receives the bound address.
func (s *Server) Serve(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("listen: %w", err)
	}
	s.hosts.Listening(ln.Addr())
	if err := s.egress.AddOwn(ln.Addr()); err != nil {
		ln.Close()
		s.Close()
		return err
	}
	if s.cluster != nil {
		addr := s.cfg.AdvertiseAddr
		if addr == "" {
			addr = advertised(ln.Addr())
		}
		s.log.Info("advertising this host to the others", "addr", addr)
		if err := s.cluster.Advertise(ctx, addr); err != nil {
			ln.Close()
			s.Close()
			return fmt.Errorf("advertise %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	msrv, err := s.serveMetrics()
	if err != nil {
		ln.Close()
		s.Close()
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	if msrv != nil {
		go func() { errc <- fmt.Errorf("metrics listener: %w", msrv.serve()) }()
	}
	// How to use the key comes before "listening", which is what a
	// supervisor (or a test) waits for.
	if s.cfg.Announce {
		if err := s.dir.Announce("http://" + ln.Addr().String()); err != nil {
			s.log.Warn("the CLI will not find this server", "err", err)
		}
		if s.keyFile != "" {
			// The path, never the key: logs travel further than the file.
			s.log.Info(fmt.Sprintf(`every route but /health and the spec needs the API key: curl -H "Authorization: Bearer $(cat %s)" http://%s/processes`, s.keyFile, ln.Addr()), "keyFile", s.keyFile)
		}
	}
	if msrv != nil {
		s.log.Info("metrics listening", "addr", msrv.ln.Addr().String())
	}
	s.log.Info("cyrnel listening", "addr", ln.Addr().String(), "version", s.cfg.Version, "auth", s.cfg.APIKey != "", "tracing", s.tracing.Enabled)
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		srv.Close()
		msrv.close()
		s.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down")
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Stop accepting first; in-flight requests (long polls included) end as
	// their processes are killed by the stack's unwinding, whose
	// "requests" step waits for them.
	done := make(chan struct{})
	s.mu.Lock()
	s.requestsDone = done
	s.mu.Unlock()
	go func() {
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		close(done)
	}()
	// Scrapes go on until the host's own work has stopped.
	defer msrv.close()
	return s.stack.Stop(sctx)
}

// advertised is the address the other hosts reach this one at when the
// operator names none: the bound listen address, or for an unspecified one
// (0.0.0.0, ::), which would lead another host to itself, the machine's
// host name with the bound port.
func advertised(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	name, err := os.Hostname()
	if err != nil {
		return addr.String()
	}
	return net.JoinHostPort(name, strconv.Itoa(tcp.Port))
}

// Close releases everything without serving (for New's callers that stop
// early, and tests): the same unwinding as Serve's shutdown.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.stack.Stop(ctx) //nolint:errcheck // Stop logs each failure
}

// bindings are the host callbacks environments get: process reporting from
// the process manager, tools from the services manager.
type bindings struct {
	*process.Manager
	tools *services.Manager
	gate  *gate.Gate
}

func (b *bindings) InvokeTool(ctx context.Context, in module.InvokeInput) (any, error) {
	return b.gate.Invoke(ctx, gate.FromCode, in)
}

func (b *bindings) SearchTools(ctx context.Context, query string, limit int) ([]module.ToolMatch, error) {
	enabled := true
	items, err := b.tools.Find(ctx, query, &enabled, limit)
	if err != nil {
		return nil, err
	}
	out := make([]module.ToolMatch, 0, len(items))
	for _, it := range items {
		out = append(out, module.ToolMatch{ServiceID: it.ServiceID, ToolID: it.ID, Name: it.Name, Description: it.Description, Score: it.Score})
	}
	return out, nil
}

func (b *bindings) ListTools(ctx context.Context) ([]module.Tool, error) {
	return b.tools.ListTools(ctx)
}

func (b *bindings) ToolDocsInput(ctx context.Context, serviceID, toolID string) (module.ToolDocsInput, error) {
	t, err := b.tools.Tool(ctx, serviceID, toolID)
	if err != nil {
		return module.ToolDocsInput{}, err
	}
	return module.ToolDocsInput{ServiceID: t.ServiceID, ToolID: t.ID, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema}, nil
}

func (b *bindings) ListServiceTools(ctx context.Context, serviceID string) ([]module.Tool, error) {
	return b.tools.ListServiceTools(ctx, serviceID)
}
