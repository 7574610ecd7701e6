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
	"github.com/cyrnel/cyrnel/host/mcp"
	"github.com/cyrnel/cyrnel/host/metrics"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/origins"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/retention"
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
	// server shuts it down when it stops.
	Tracing *tracing.Provider
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
	log       *slog.Logger
	cfg       Config
	keyFile   string // the data directory's key file, when the key is from there
	dir       *datadir.Dir
	store     *store.Store
	procs     *process.Manager
	sessions  *session.Manager
	audit     *audit.Writer
	approvals *approval.Manager
	gate      *gate.Gate
	modules   *modules.Registry
	services  *services.Manager
	cluster   *cluster.Cluster // nil on SQLite
	handler   http.Handler
	hosts     *origins.Allowed
	// egress learns the listen address, which tool calls never reach.
	egress  *egress.Guard
	keys    *keys.Manager
	changes *changes.Log
	mcp     *mcp.Handler
	metrics *metrics.Metrics
	tracing *tracing.Provider
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
// left running, and activates the stored environment.
func New(ctx context.Context, log *slog.Logger, cfg Config) (srv *Server, err error) {
	if err := CheckAddr(cfg.Addr, cfg.APIKey, cfg.Insecure); err != nil {
		return nil, err
	}
	hostSandbox, err := modules.CheckHostSandbox(sandbox.Probe(), cfg.AllowUnsandboxed)
	if err != nil {
		return nil, err
	}
	if len(hostSandbox.Missing) > 0 {
		log.Warn("running without sandbox layers this machine lacks (--allow-unsandboxed)", "missing", hostSandbox.Missing)
	}
	interpreters, err := declarePython(log, cfg.Python)
	if err != nil {
		return nil, err
	}
	machine, err := worker.ReadMachine()
	if err != nil {
		return nil, err
	}
	dir, err := datadir.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Tracing == nil {
		cfg.Tracing = tracing.Off()
	}
	var tracer trace.Tracer // nil: the domain packages trace nothing
	if cfg.Tracing.Enabled {
		tracer = cfg.Tracing.Tracer("github.com/cyrnel/cyrnel")
	}
	met := metrics.New()
	var st *store.Store
	var cl *cluster.Cluster
	defer func() {
		if err != nil {
			if cl != nil {
				cl.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // already failing
			}
			if st != nil {
				st.Close()
			}
			dir.Close()
		}
	}()
	var dbTracing trace.TracerProvider // nil: no span per statement
	if cfg.Tracing.Enabled {
		dbTracing = cfg.Tracing
	}
	if st, err = store.Open(ctx, cfg.DBURL, cfg.DataDir, store.Options{UsedDataDir: dir.Used, Log: log.With("component", "store"), Tracing: dbTracing}); err != nil {
		return nil, err
	}
	keyFile := ""
	if cfg.APIKey == "" {
		// Nobody else on the machine may use a server started on its
		// defaults: it makes a key only its operator can read (DESIGN §11).
		var created bool
		if cfg.APIKey, created, err = dir.APIKey(); err != nil {
			return nil, err
		}
		keyFile = filepath.Join(cfg.DataDir, datadir.APIKeyFile)
		if created {
			log.Info("created an API key", "file", keyFile)
		}
	}
	if !st.Local() && cfg.SecretsKey == "" {
		// A key generated per data directory would differ between hosts,
		// each unable to open what the others sealed.
		return nil, errors.New("with PostgreSQL every host must share one secrets key: set CYRNEL_SECRETS_KEY (or CYRNEL_SECRETS_KEY_FILE) to the same base64 32-byte key on each host")
	}
	box, err := openSecrets(ctx, log, st, cfg.SecretsKey, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var notifier control.Notifier
	if !st.Local() {
		if cl, err = cluster.New(ctx, log.With("component", "cluster"), cfg.DBURL, dir.HostID, st, cluster.Options{TTL: cfg.LeaseTTL, Observer: met}); err != nil {
			return nil, err
		}
		notifier = cl
	}
	// One control plane for modules and services: every configuration
	// change is applied one at a time, all or nothing; with several hosts
	// each stored change is announced to the others, which reload it.
	plane := control.New(log.With("component", "control"), notifier, cfg.Policies...)
	// Every configuration change is recorded with the key that made it.
	record := changes.New(log.With("component", "changes"), st, cfg.Governance.Changes)
	defer func() {
		if err != nil {
			record.Close()
		}
	}()
	plane.RecordTo(record)
	reg := modules.New(log.With("component", "modules"), st, box, plane, map[string]modules.Factory{
		"python": func() module.Environment {
			return python.New(log, python.Options{Interpreters: interpreters, Packages: python.PackageSource{
				Index: cfg.PackageIndex, FindLinks: cfg.FindLinks, CacheDir: filepath.Join(cfg.DataDir, "packages"),
			}})
		},
		typescript.ID: func() module.Environment { return typescript.New(log) },
	})
	guard := &egress.Guard{}
	svcs := services.New(log.With("component", "services"), st, box, plane, map[string]adapter.Adapter{
		openapi.ID: openapi.New(openapi.Options{Guard: guard, WrapTransport: upstreamTracing(cfg.Tracing)}),
	})
	reg.AllowUnsandboxed(cfg.AllowUnsandboxed)
	reg.LimitTo(machine)
	for _, info := range svcs.Adapters() {
		reg.AddInfo(info)
	}
	if err = svcs.Start(ctx); err != nil {
		return nil, err
	}
	procs := process.New(log.With("component", "processes"), st, reg, cfg.Limits, dir.HostID, 0)
	procs.Instrument(met, tracer)
	if err = procs.Recover(ctx); err != nil {
		return nil, err
	}
	policies, err := policy.Load(ctx, st, cfg.Governance.DefaultPolicy)
	if err != nil {
		return nil, err
	}
	policies.RecordTo(record)
	if cl != nil {
		policies.OnChange(func(ctx context.Context) { cl.Notify(ctx, control.Event{Kind: control.KindPolicies}) })
	}
	approvals := approval.New(log.With("component", "approvals"), st, cfg.Governance.Approvals)
	if cl != nil {
		approvals.Shared(cl)
	}
	if err = approvals.Recover(ctx); err != nil {
		approvals.Close()
		return nil, err
	}
	auditor := audit.New(log.With("component", "audit"), st, cfg.Governance.Audit)
	sessions := session.New(log.With("component", "sessions"), st, reg, dir.HostID, cfg.Sessions)
	if err = sessions.Recover(ctx); err != nil {
		return nil, err
	}
	procs.UseSessions(sessions)
	g := &gate.Gate{Policies: policies, Approvals: approvals, Audit: auditor, Processes: procs, Tools: svcs, Observer: met, Tracer: tracer}
	if err = reg.Start(ctx, &bindings{Manager: procs, tools: svcs, gate: g}, cfg.Environment); err != nil {
		return nil, err
	}
	if cl != nil {
		procs.SetRelay(cl)
		procs.FollowApprovals(pendingApprovals{approvals})
		cl.Start(clusterHandlers(st, procs, sessions, approvals, policies, reg, svcs))
	}
	mcpHandler := mcp.New(mcp.Deps{Log: log.With("component", "mcp"), Version: cfg.Version, Processes: procs, Environments: reg, Tools: mcpTools{svcs, reg}, Sessions: sessions}, mcp.Options{})
	// Another host forwards to this one naming the advertised address.
	hosts := origins.New(append(cfg.AllowedHosts, cfg.AdvertiseAddr))
	var others api.Peers
	if cl != nil {
		others = peers{st, dir.HostID}
	}
	keyring := keys.New(log.With("component", "keys"), st, record, keys.Options{Bootstrap: cfg.APIKey, BootstrapSince: keySince(keyFile)})
	met.Watch(gauges(procs, reg, sessions, approvals, svcs, cl))
	handler, _ := api.New(api.Deps{Log: log, Version: cfg.Version, Keys: keyring, Changes: record, Processes: procs, Environment: reg, Modules: reg, Services: svcs, Tools: svcs, Sessions: sessions, MCP: mcpHandler, Hosts: hosts, Peers: others,
		Policies: policies, Approvals: approvals, ToolCalls: toolCalls{auditor, st}, Gate: g, Ready: readiness{st, reg}, Sandbox: hostSandbox,
		Metrics: met.Handler(), Requests: met, Tracing: requestTracing(cfg.Tracing)})
	// The console's assets and the API reference sit in front of the API
	// (and its authentication): they hold no data.
	handler = console.Handler(handler)
	return &Server{log: log, cfg: cfg, keyFile: keyFile, dir: dir, store: st, procs: procs, sessions: sessions, audit: auditor, approvals: approvals, gate: g, modules: reg, services: svcs, cluster: cl, handler: handler, hosts: hosts, egress: guard,
		keys: keyring, changes: record, mcp: mcpHandler, metrics: met, tracing: cfg.Tracing}, nil
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
	// their processes are killed below.
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(sctx) }()
	// MCP sessions hold event streams open: end them so Shutdown need not
	// wait them out.
	s.mcp.Close()
	// Scrapes go on until the host's own work has stopped.
	defer msrv.close()
	if s.cluster != nil {
		// One of several hosts: running programs get half the shutdown
		// time to finish before they are ended (host_shutdown), so a
		// rolling deploy loses as little as it can.
		dctx, dcancel := context.WithTimeout(sctx, timeout/2)
		s.procs.Drain(dctx)
		dcancel()
	}
	if err := s.procs.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	if err := s.sessions.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	if s.cluster != nil {
		if err := s.cluster.Stop(sctx); err != nil {
			s.log.Warn("shutdown", "err", err)
		}
	}
	if err := s.modules.Stop(sctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	if err := s.services.Stop(sctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	if err := <-httpDone; err != nil {
		srv.Close()
	}
	s.audit.Close()
	s.approvals.Close()
	s.keys.Close()
	s.changes.Close()
	// The spans of the executions just ended go out before the host does.
	if err := s.tracing.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	err = s.store.Close()
	s.dir.Close()
	return err
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
// early, and tests).
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.mcp.Close()
	_ = s.procs.Shutdown(ctx)
	_ = s.sessions.Shutdown(ctx)
	if s.cluster != nil {
		_ = s.cluster.Stop(ctx)
	}
	_ = s.modules.Stop(ctx)
	_ = s.services.Stop(ctx)
	s.audit.Close()
	s.approvals.Close()
	s.keys.Close()
	s.changes.Close()
	_ = s.tracing.Shutdown(ctx)
	s.store.Close()
	s.dir.Close()
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
