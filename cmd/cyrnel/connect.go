package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/server"
	"github.com/cyrnel/cyrnel/openapi/client"
)

// hostFlags are the flags of every command that talks to a host: a running
// server (--server) or one embedded in this process.
type hostFlags struct {
	fs *flag.FlagSet
}

func addHostFlags(fs *flag.FlagSet) hostFlags {
	fs.String("server", "", "URL of a running cyrnel server (env CYRNEL_SERVER); its key comes from CYRNEL_API_KEY. Default: an embedded host")
	fs.String("data-dir", "", "data directory of the embedded host (env CYRNEL_DATA_DIR, default ./cyrnel-data)")
	return hostFlags{fs}
}

const hostHelp = `
Without --server the command runs on a host embedded in this process, on the
data directory (its database, services and secrets key), listening on an
ephemeral loopback port for as long as the command runs. Do not point it at a
data directory a running server uses: send the work to that server instead.

Environment variables (a flag, when given, wins over its variable):
  CYRNEL_SERVER        URL of a running server (as --server)
  CYRNEL_API_KEY       that server's API key
  CYRNEL_DATA_DIR      data directory of the embedded host (default ./cyrnel-data)
  CYRNEL_DB_URL        database of the embedded host (default SQLite in the data directory)
  CYRNEL_SECRETS_KEY   secrets key of the embedded host (default the key file in the data directory)
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
	if url := setting(h.fs, "server", "CYRNEL_SERVER", ""); url != "" {
		url = strings.TrimRight(url, "/")
		c, err := client.NewClientWithResponses(url, client.WithBearer(os.Getenv("CYRNEL_API_KEY")))
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", url, err)
		}
		return &host{api: c, url: url, close: func() error { return nil }}, nil
	}
	level := os.Getenv("CYRNEL_LOG_LEVEL")
	if level == "" {
		level = "warn" // the program's output is what the terminal is for
	}
	log, err := newLogger(level)
	if err != nil {
		return nil, err
	}
	// A fresh key per run: nobody else on the machine can use the port
	// while the command runs.
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("api key: %w", err)
	}
	cfg := server.Config{
		Addr:        "127.0.0.1:0",
		DataDir:     setting(h.fs, "data-dir", "CYRNEL_DATA_DIR", "./cyrnel-data"),
		DBURL:       os.Getenv("CYRNEL_DB_URL"),
		APIKey:      hex.EncodeToString(key),
		SecretsKey:  os.Getenv("CYRNEL_SECRETS_KEY"),
		Version:     version,
		Limits:      process.DefaultLimits(),
		Environment: env,
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

// parseInterspersed parses flags wherever they stand among the arguments
// (cyrnel run prog.py --timeout 5s) and returns the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
