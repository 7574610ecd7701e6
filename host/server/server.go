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
	"strconv"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/python"
	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/cluster"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/datadir"
	"github.com/cyrnel/cyrnel/host/egress"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/maxprocs"
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
	// from (serve --package-index, --find-links). PackageHosts are the
	// other origins (scheme://host[:port]) the index may link files at
	// (serve --package-host); a build reaches nothing else.
	PackageIndex, FindLinks string
	PackageHosts            []string
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
	Announce bool
	// AdaptProcs lets the host set its GOMAXPROCS from its load (package
	// maxprocs): a process-wide setting, so the serving process's (cyrnel
	// serve), not a test's or the CLI's embedded hosts.
	AdaptProcs bool
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
	plane       *control.Plane
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
	// registry is the host's metrics registry: the parts' collectors are
	// registered on it as the parts are built.
	registry *metrics.Registry
	metrics  *metrics.Metrics
	tracing  *tracing.Provider
	// now is the one clock every part stamps rows and decides deadlines
	// by (see Clock in docs/decisions.md).
	now func() time.Time

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
	if cfg.AdaptProcs {
		if err = stack.Start(ctx, "maxprocs", maxprocs.New(log.With("component", "maxprocs"))); err != nil {
			return nil, err
		}
	}
	if err = cfg.packageSource().Check(); err != nil {
		return nil, err
	}
	hostSandbox, err := checkHostSandbox(sandbox.Probe(), cfg.AllowUnsandboxed)
	if err != nil {
		return nil, err
	}
	if len(hostSandbox.Missing) > 0 {
		log.Warn("running without sandbox layers this machine lacks (--allow-unsandboxed)", "missing", hostSandbox.Missing)
	}
	registry := metrics.NewRegistry()
	s := &Server{log: log, stack: stack, tracing: cfg.Tracing, registry: registry, metrics: metrics.New(registry), hostSandbox: hostSandbox,
		now: time.Now}
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

// keySince is when the bootstrap key was made, as GET /keys shows it: the
// key file's time when it is from the data directory, else now.
func (s *Server) keySince() time.Time {
	if s.keyFile != "" {
		if fi, err := os.Stat(s.keyFile); err == nil {
			return fi.ModTime().UTC()
		}
	}
	return s.now().UTC()
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
