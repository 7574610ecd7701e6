// Package cli is cyrnel's command-line client: run, services and tools,
// which talk to a host through the generated API client, and the flag
// helpers every command shares.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/cyrnel/cyrnel/host/logs"
)

// Strings is a repeatable string flag.
type Strings []string

func (s *Strings) String() string { return strings.Join(*s, ":") }

// Set adds one value.
func (s *Strings) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// Interpreters are the Pythons the operator declares: --python's values
// when given, else CYRNEL_PYTHON's ':'-separated list (empty entries
// dropped).
func Interpreters(given Strings) []string {
	if len(given) > 0 {
		return given
	}
	var out []string
	for _, p := range strings.Split(os.Getenv("CYRNEL_PYTHON"), ":") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Setting resolves a value: the flag when given, else the environment
// variable, else the default.
func Setting(fs *flag.FlagSet, name, env, def string) string {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if given {
		return fs.Lookup(name).Value.String()
	}
	if v, ok := os.LookupEnv(env); ok && v != "" {
		return v
	}
	return def
}

// NewLogger is a logger on stderr at level, in format text (key=value
// lines) or json (JSON lines, for log shippers); each record logged with a
// context carries its trace_id, span_id and pid (host/logs).
func NewLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	return slog.New(logs.NewHandler(h)), nil
}

// ErrUsage is a command line that could not be parsed; it was reported.
var ErrUsage = errors.New("usage error")

// Parse parses args into fs. Help asked for (-h, --help) goes to stdout and
// is flag.ErrHelp; a usage error goes to stderr with the usage, and is
// ErrUsage.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	report(fs, err)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return err
}

func report(fs *flag.FlagSet, err error) {
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fs.Usage()
	case err != nil:
		fs.SetOutput(os.Stderr)
		fmt.Fprintf(os.Stderr, "cyrnel %s: %v\n", fs.Name(), err)
		fs.Usage()
	}
}

// parseInterspersed parses flags wherever they stand among the arguments
// (cyrnel run prog.py --timeout 5s) and returns the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := Parse(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
