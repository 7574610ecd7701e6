package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/python"
	"github.com/cyrnel/cyrnel/envs/typescript"
	"github.com/cyrnel/cyrnel/envs/worker"
	"github.com/cyrnel/cyrnel/host/adapters"
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
	"github.com/cyrnel/cyrnel/host/peer"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

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
	if s.store, err = store.Open(ctx, cfg.DBURL, cfg.DataDir, store.Options{UsedDataDir: s.dir.Used, Log: s.log.With("component", "store"), Tracing: dbTracing, Now: s.now}); err != nil {
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
	// The lease is taken before anything runs, and given up once
	// everything that ran has stopped.
	s.cluster = cluster.New(s.log.With("component", "cluster"), cfg.DBURL, s.dir.HostID, s.store, cluster.Options{TTL: cfg.LeaseTTL, Observer: metrics.NewNotificationLag(s.registry)})
	return s.stack.Start(ctx, "cluster", s.cluster)
}

// startGovernance starts the record of changes, the keys, policies,
// approvals and the audit.
func (s *Server) startGovernance(ctx context.Context, cfg Config) (err error) {
	// Every configuration change is recorded with the key that made it.
	s.changes = changes.New(s.log.With("component", "changes"), s.store, changes.Options{Bounds: cfg.Governance.Changes, Now: s.now})
	if err = s.stack.Start(ctx, "changes", s.changes); err != nil {
		return err
	}
	s.keys = keys.New(s.log.With("component", "keys"), s.store, s.changes, keys.Options{Bootstrap: cfg.APIKey, BootstrapSince: s.keySince(), Now: s.now})
	if err = s.stack.Start(ctx, "keys", s.keys); err != nil {
		return err
	}
	var notifier control.Notifier
	if s.cluster != nil {
		notifier = s.cluster
	}
	// One control plane for the policies, modules and services: every
	// configuration change is applied one at a time, all or nothing; with
	// several hosts each stored change is announced to the others, which
	// reload it.
	s.plane = control.New(s.log.With("component", "control"), notifier, s.changes, cfg.Policies...)
	if s.policies, err = policy.Load(ctx, s.store, s.plane, cfg.Governance.DefaultPolicy); err != nil {
		return err
	}
	var relay approval.Relay // nil: one host
	if s.cluster != nil {
		relay = s.cluster
	}
	approvals := cfg.Governance.Approvals
	approvals.Now = s.now
	s.approvals = approval.New(s.log.With("component", "approvals"), s.store, relay, approvals)
	if err = s.stack.Start(ctx, "approvals", s.approvals); err != nil {
		return err
	}
	audits := cfg.Governance.Audit
	audits.Now = s.now
	s.audit = audit.New(s.log.With("component", "audit"), s.store, audits)
	if err = s.stack.Start(ctx, "audit", s.audit); err != nil {
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
	s.egress = &egress.Guard{}
	s.services = services.New(s.log.With("component", "services"), s.store, s.box, s.plane, map[string]adapters.Adapter{
		openapi.ID: openapi.New(openapi.Options{Guard: s.egress, WrapTransport: upstreamTracing(cfg.Tracing)}),
	}, services.Options{Now: s.now})
	// The adapters are modules too: listed and configured with the
	// environments.
	s.modules = modules.New(s.log.With("component", "modules"), s.store, s.box, s.plane, environments(s.log, interpreters, cfg.packageSource()),
		modules.Options{AllowUnsandboxed: cfg.AllowUnsandboxed, Machine: machine, Others: s.services.Adapters(), Environment: cfg.Environment, Now: s.now})
	if err = s.stack.Start(ctx, "services", s.services); err != nil {
		return err
	}
	// The environment is activated below, once processes can report; it
	// is stopped after them.
	if err = s.stack.Start(ctx, "modules", lifecycle.Func{OnStop: s.modules.Stop}); err != nil {
		return err
	}
	sessions := cfg.Sessions
	sessions.Now = s.now
	s.sessions = session.New(s.log.With("component", "sessions"), s.store, s.modules, s.dir.HostID, sessions)
	if err = s.stack.Start(ctx, "sessions", s.sessions); err != nil {
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
	with := s.processParts(tracer)
	// The files a run leaves are spooled on the data directory's disk, which
	// the operator sized for them, not the system's (often tmpfs) /tmp. The
	// directory is this host's (the data directory is locked): what a
	// crash left there is removed.
	with.SpoolDir = filepath.Join(s.dir.Path, "spool")
	if err = os.RemoveAll(with.SpoolDir); err == nil {
		err = os.MkdirAll(with.SpoolDir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("process file spool: %w", err)
	}
	s.procs = process.New(s.log.With("component", "processes"), s.store, s.modules, cfg.Limits, s.dir.HostID, 0, with)
	if err = s.stack.Start(ctx, "processes", lifecycle.Func{OnStart: s.procs.Start, OnStop: s.stopProcesses}); err != nil {
		return err
	}
	s.gate = &gate.Gate{Policies: s.policies, Approvals: s.approvals, Audit: s.audit, Processes: s.procs, Tools: s.services, Observer: metrics.NewToolCalls(s.registry, s.services.Has), Tracer: tracer, Now: s.now}
	if err = s.stack.Start(ctx, "environment", s.modules.Activation(&bindings{Manager: s.procs, tools: s.services, gate: s.gate})); err != nil {
		return err
	}
	if cl := s.cluster; cl != nil {
		handlers := clusterHandlers(s.store, s.procs, s.sessions, s.approvals, s.policies, s.modules, s.services)
		if err = s.stack.Start(ctx, "cluster handlers", cl.Handling(handlers)); err != nil {
			return err
		}
	}
	deps := mcp.Deps{Log: s.log.With("component", "mcp"), Version: cfg.Version, Processes: s.procs, Environments: s.modules, Tools: mcpTools{s.services, s.modules}, Sessions: s.sessions}
	if s.cluster != nil {
		deps.Remote = peer.NewClient(peers{s.store, s.dir.HostID})
	}
	s.mcp = mcp.New(deps, mcp.Options{})
	// MCP sessions hold event streams open: they end first, so the
	// listener's shutdown need not wait them out.
	return s.stack.Start(ctx, "mcp", lifecycle.Closer(s.mcp.Close))
}

// processParts are what the process manager works with: on PostgreSQL the
// cluster relays to the other hosts and their approvals are read back.
func (s *Server) processParts(tracer trace.Tracer) process.With {
	with := process.With{Instruments: process.Instruments{Observer: s.metrics, Tracer: tracer}, Sessions: s.sessions, Now: s.now}
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
	return s.procs.Stop(ctx)
}

// assembleHandler builds the HTTP API over the started parts.
func (s *Server) assembleHandler(cfg Config) {
	// Another host forwards to this one naming the advertised address.
	s.hosts = origins.New(append(cfg.AllowedHosts, cfg.AdvertiseAddr))
	var others api.Peers
	if s.cluster != nil {
		others = peers{s.store, s.dir.HostID}
	}
	s.registry.MustRegister(gauges(s.procs, s.modules, s.sessions, s.approvals, s.cluster))
	handler, _ := api.New(api.Deps{Log: s.log, Version: cfg.Version, Keys: s.keys, Changes: s.changes, Processes: s.procs, Environment: s.modules, Modules: s.modules, Services: s.services, Tools: s.services, Sessions: s.sessions, MCP: s.mcp, Hosts: s.hosts, Peers: others,
		Policies: s.policies, Approvals: s.approvals, ToolCalls: toolCalls{s.audit, s.store}, Gate: s.gate, Ready: readiness{s.store, s.modules}, Sandbox: s.hostSandbox,
		Metrics: s.registry.Handler(), Requests: s.metrics, Tracing: requestTracing(cfg.Tracing)})
	// The console's assets and the API reference sit in front of the API
	// (and its authentication): they hold no data.
	s.handler = console.Handler(handler)
}

// environments are the environments this host can activate.
func environments(log *slog.Logger, interpreters []python.Interpreter, packages python.PackageSource) map[string]modules.Factory {
	builds := python.NewBuilds() // one per host: a build runs once, and shows while it runs
	return map[string]modules.Factory{
		"python": func() module.Environment {
			return python.New(log, python.Options{Interpreters: interpreters, Builds: builds, Packages: packages})
		},
		typescript.ID: func() module.Environment { return typescript.New(log) },
	}
}

// packageSource is where the Python environment's declared packages come
// from, as the operator named it, and where their builds are kept.
func (cfg Config) packageSource() python.PackageSource {
	return python.PackageSource{Index: cfg.PackageIndex, FileHosts: cfg.PackageHosts, FindLinks: cfg.FindLinks, CacheDir: filepath.Join(cfg.DataDir, "packages")}
}

// closeErr adapts a component that stops with Close() error.
func closeErr(close func() error) lifecycle.Component {
	return lifecycle.Func{OnStop: func(context.Context) error { return close() }}
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
	return lifecycle.Await(ctx, done)
}
