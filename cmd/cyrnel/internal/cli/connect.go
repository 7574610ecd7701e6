package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	neturl "net/url"
	"os"
	"strings"

	"github.com/cyrnel/cyrnel/host/datadir"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/server"
	"github.com/cyrnel/cyrnel/openapi/client"
)

// hostFlags are the flags of every command that talks to a host: a running
// server (--server) or one embedded in this process.
type hostFlags struct {
	fs      *flag.FlagSet
	version string
}

// clientFlags is the flag set of a command that talks to a host: its own
// usage text, its flags, then the host flags and their help.
func clientFlags(name, usage, version string) (*flag.FlagSet, hostFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	hf := addHostFlags(fs, version)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), hostHelp)
	}
	return fs, hf
}

func addHostFlags(fs *flag.FlagSet, version string) hostFlags {
	fs.String("server", "", "URL of a running cyrnel server (env CYRNEL_SERVER); its key comes from CYRNEL_API_KEY, else the data directory's api-key file when the URL names this machine. Default: the server running on the data directory, else an embedded host")
	fs.String("data-dir", "", "data directory (env CYRNEL_DATA_DIR, default ./cyrnel-data): of the embedded host, or where a server's api-key file is")
	return hostFlags{fs, version}
}

const hostHelp = `
Without --server the command sends its work to the cyrnel serve that holds
the data directory, when one does (it records its address there; the key is
read from the data directory's api-key file). Otherwise it runs on a host
embedded in this process, on the data directory (its database, services and
secrets key), listening on an ephemeral loopback port for as long as the
command runs.

Environment variables (a flag, when given, wins over its variable):
  CYRNEL_SERVER        URL of a running server (as --server)
  CYRNEL_API_KEY       that server's API key (default: DATA_DIR/api-key, sent only to a server on this machine)
  CYRNEL_DATA_DIR      data directory of the embedded host (default ./cyrnel-data)
  CYRNEL_DB_URL        database of the embedded host (default SQLite in the data directory)
  CYRNEL_SECRETS_KEY   secrets key of the embedded host (default the key file in the data directory)
  CYRNEL_PYTHON        the embedded host's Python interpreters, ':'-separated (as serve --python)
  CYRNEL_ALLOW_UNSANDBOXED=1
                       let the embedded host run a module config that weakens the sandbox, or run
                       on a machine without a usable memory or pids cgroup
  CYRNEL_LOG_LEVEL     log level of the embedded host (default warn)
`

// host is a cyrnel API to talk to, through the generated client: one code
// path whether the host is remote or embedded.
type host struct {
	api      *client.ClientWithResponses
	url      string
	embedded bool
	close    func() error
}

// connect opens the host the flags name. env, when not empty, is the
// environment an embedded host activates for this run only.
func (h hostFlags) connect(env string) (*host, error) {
	dataDir := Setting(h.fs, "data-dir", "CYRNEL_DATA_DIR", "./cyrnel-data")
	url := Setting(h.fs, "server", "CYRNEL_SERVER", "")
	if url != "" {
		// The data directory's key goes only to a server on this machine:
		// never to whatever URL --server names.
		return remote(strings.TrimRight(url, "/"), dataDir, isLoopback(url))
	}
	// A server holding the data directory gets the work: an embedded host
	// could not open it.
	url, err := datadir.Running(dataDir)
	if err != nil {
		return nil, err
	}
	if url != "" {
		return remote(url, dataDir, true)
	}
	return h.embedded(env, dataDir)
}

// isLoopback reports whether a server URL names this machine.
func isLoopback(raw string) bool {
	u, err := neturl.Parse(raw)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.IsLoopback()
}

// embedded starts a host in this process on dataDir.
func (h hostFlags) embedded(env, dataDir string) (*host, error) {
	level := os.Getenv("CYRNEL_LOG_LEVEL")
	if level == "" {
		level = "warn" // the program's output is what the terminal is for
	}
	log, err := NewLogger(level, "text")
	if err != nil {
		return nil, err
	}
	// A fresh key per run: nobody else on the machine can use the port
	// while the command runs.
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("api key: %w", err)
	}
	if err := SetSandboxUIDs(os.Getenv("CYRNEL_SANDBOX_UIDS")); err != nil {
		return nil, err
	}
	cfg := server.Config{
		Addr:        "127.0.0.1:0",
		DataDir:     dataDir,
		DBURL:       os.Getenv("CYRNEL_DB_URL"),
		APIKey:      hex.EncodeToString(key),
		SecretsKey:  os.Getenv("CYRNEL_SECRETS_KEY"),
		Version:     h.version,
		Limits:      process.DefaultLimits(),
		Environment: env,
		// Whoever runs the command owns the data directory: the same
		// operator decisions as serve's, from the environment.
		Python:           Interpreters(nil),
		AllowUnsandboxed: os.Getenv("CYRNEL_ALLOW_UNSANDBOXED") == "1",
	}
	srv, err := server.New(context.Background(), log, cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded host: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, func(a string) { addr <- a }) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		stop()
		return nil, fmt.Errorf("embedded host: %w", err)
	}
	c, err := client.NewClientWithResponses(url, client.WithBearer(cfg.APIKey))
	if err != nil {
		stop()
		return nil, errors.Join(err, <-done)
	}
	return &host{api: c, url: url, embedded: true, close: func() error {
		stop()
		if err := <-done; err != nil {
			return fmt.Errorf("embedded host: %w", err)
		}
		return nil
	}}, nil
}

// remote is a running server at url. Its key is CYRNEL_API_KEY, else (when
// keyFile) the one the server made in dataDir, when that exists.
func remote(url, dataDir string, keyFile bool) (*host, error) {
	key := os.Getenv("CYRNEL_API_KEY")
	if key == "" && keyFile {
		var err error
		if key, err = datadir.ReadAPIKey(dataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	c, err := client.NewClientWithResponses(url, client.WithBearer(key))
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", url, err)
	}
	return &host{api: c, url: url, close: func() error { return nil }}, nil
}
