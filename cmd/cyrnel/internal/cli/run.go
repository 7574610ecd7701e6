package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cyrnel/cyrnel/openapi/client"
)

// Exit codes of cyrnel run, one per way a program can end (and two for
// when it could not start).
const (
	exitSuccess  = 0
	exitFailed   = 1
	exitUsage    = 2
	exitTimeout  = 3
	exitCanceled = 4
	exitError    = 5
)

const runUsage = `Usage: cyrnel run [flags] FILE.py|FILE.ts|-

Runs a program and streams its stdout and stderr to this terminal as it writes
them. When it ends, its structured output (what it passed to cyrnel.output) is
printed to stdout as indented JSON, when there is any, or written to --output.
Displays (cyrnel.display(obj), figures left open, a final expression's value)
are printed as text as they come; images are saved next to --output (as
OUTPUT-display-N.png), or named on stderr without it.
The first Ctrl-C kills the program; a second one stops waiting for it.

The environment is chosen by the file's extension (.py: python; .ts and .js:
typescript) or --env. A host this command starts runs it in that
environment; a running server must have it active (PUT /environment switches
every program on that server, so the command does not do it: it fails with
exit code 5, saying how). A program read from stdin (-), or from a file with
another extension, runs in the active environment.

Exit codes:
  0  success
  1  failed: the program raised an exception or exited non-zero
  2  usage error
  3  timeout
  4  canceled: killed (Ctrl-C, or POST /processes/{pid}/kill), or the host shut down
  5  cyrnel could not run it: host unreachable, wrong environment, request refused

Flags:
`

// result is how a process ended, from its exit event or, when the stream was
// cut short, from waiting for it.
type result struct {
	exitState, reason, error string
	stdout, stderr           string
	output                   map[string]any
}

// Run implements cyrnel run; it returns the exit code. version is the
// embedded host's.
func Run(args []string, version string) int {
	fs, hf := clientFlags("run", runUsage, version)
	timeout := fs.Duration("timeout", 0, "execution timeout, e.g. 500ms, 10s or 5m (default: the host's, 30s)")
	env := fs.String("env", "", "environment to run in: python or typescript (default: from the file's extension)")
	outFile := fs.String("output", "", "write the structured output as JSON to this file (always, {} when empty) instead of stdout")
	files, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitSuccess
	}
	if err != nil {
		return exitUsage
	}
	if len(files) != 1 {
		fmt.Fprintf(os.Stderr, "cyrnel run: want one FILE (or - for stdin), got %d arguments; see cyrnel run --help\n", len(files))
		return exitUsage
	}
	code, err := readProgram(files[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyrnel run:", err)
		return exitUsage
	}
	switch *env {
	case "":
		*env = environmentOf(files[0])
	case "python", "typescript":
	default:
		fmt.Fprintf(os.Stderr, "cyrnel run: --env %s: want python or typescript, the environments cyrnel has\n", *env)
		return exitUsage
	}
	if *timeout < 0 {
		fmt.Fprintln(os.Stderr, "cyrnel run: --timeout must be positive")
		return exitUsage
	}

	h, err := hf.connect(*env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyrnel run:", err)
		return exitError
	}
	defer func() {
		if err := h.close(); err != nil {
			fmt.Fprintln(os.Stderr, "cyrnel run:", err)
		}
	}()
	res, err := runProgram(h, files[0], code, *env, *timeout, *outFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyrnel run:", err)
		return exitError
	}
	if err := writeOutput(res, *outFile); err != nil {
		fmt.Fprintln(os.Stderr, "cyrnel run:", err)
		return exitError
	}
	switch res.exitState {
	case "success":
		return exitSuccess
	case "timeout":
		fmt.Fprintf(os.Stderr, "cyrnel run: timed out (%s)\n", res.reason)
		return exitTimeout
	case "canceled":
		fmt.Fprintf(os.Stderr, "cyrnel run: canceled (%s)\n", res.reason)
		return exitCanceled
	}
	fmt.Fprintf(os.Stderr, "cyrnel run: failed (%s): %s\n", res.reason, res.error)
	return exitFailed
}

func readProgram(path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read program: %w", err)
	}
	return string(b), nil
}

// environmentOf picks the environment for a file by its extension; empty
// means the active one.
func environmentOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".py":
		return "python"
	case ".ts", ".js":
		return "typescript"
	}
	return ""
}

func runProgram(h *host, path, code, env string, timeout time.Duration, outFile string) (*result, error) {
	ctx := context.Background()
	if err := checkEnvironment(ctx, h, env); err != nil {
		return nil, err
	}
	body := client.CreateProcessJSONRequestBody{Code: code}
	if path != "-" {
		ref := filepath.Base(path)
		body.Ref = &ref
	}
	if timeout > 0 {
		ms := max(timeout.Milliseconds(), 1)
		body.TimeoutMs = &ms
	}
	created, err := client.Check(h.api.CreateProcessWithResponse(ctx, body))
	if err != nil {
		return nil, fmt.Errorf("create process: %w", err)
	}
	pid := created.JSON201.Pid

	// First Ctrl-C: kill the program and report how it ended. Second: stop
	// waiting.
	follow, stop := context.WithCancel(ctx)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
		case <-follow.Done():
			return
		}
		fmt.Fprintf(os.Stderr, "\ncyrnel run: killing process %d (Ctrl-C again to stop waiting)\n", pid)
		if _, err := client.Check(h.api.KillProcessWithResponse(ctx, pid)); err != nil {
			fmt.Fprintln(os.Stderr, "cyrnel run: kill:", err)
		}
		select {
		case <-sigs:
			stop()
		case <-follow.Done():
		}
	}()

	var res *result
	var outN, errN int // bytes of stdout and stderr already shown
	err = h.api.FollowProcess(follow, pid, func(ev client.ProcessEvent) error {
		switch {
		case ev.Stdout != nil:
			outN += len(ev.Stdout.Text)
			_, err := io.WriteString(os.Stdout, ev.Stdout.Text)
			return err
		case ev.Stderr != nil:
			errN += len(ev.Stderr.Text)
			_, err := io.WriteString(os.Stderr, ev.Stderr.Text)
			return err
		case ev.Approval != nil:
			// Not the program's stderr: a note from cyrnel on its own line.
			a := ev.Approval
			fmt.Fprintf(os.Stderr, "cyrnel: waiting on approval %s for %s.%s (cyrnel approvals approve|deny %s)\n", a.Id, a.ServiceId, a.ToolId, a.Id)
		case ev.Display != nil:
			return showDisplay(ev.Display, outFile)
		case ev.Exit != nil:
			e := ev.Exit
			res = &result{exitState: string(deref(e.ExitState)), reason: string(deref(e.Reason)), error: e.Error, stdout: e.Stdout, stderr: e.Stderr, output: e.Output}
		}
		return nil
	})
	if errors.Is(err, client.ErrStreamEnded) {
		// The server cut off a follower that fell behind: the rest is in
		// the stored process.
		if res, err = waitProcess(follow, h, pid); err == nil {
			showRest(os.Stdout, res.stdout, outN)
			showRest(os.Stderr, res.stderr, errN)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case res == nil:
		return nil, fmt.Errorf("process %d: the event stream ended without its exit", pid)
	}
	return res, nil
}

// showDisplay prints a display's text to stdout, or saves its image next to
// the --output file (OUTPUT-display-N.ext).
func showDisplay(d *client.DisplayEvent, outFile string) error {
	for mime, ext := range map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"} {
		data, ok := d.Data[mime]
		if !ok {
			continue
		}
		if outFile == "" {
			fmt.Fprintf(os.Stderr, "cyrnel: display %d is an image (%s): pass --output FILE to save it next to FILE\n", d.Index, mime)
			return nil
		}
		b := []byte(data)
		if mime != "image/svg+xml" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(data); err != nil {
				return fmt.Errorf("display %d: %w", d.Index, err)
			}
		}
		name := fmt.Sprintf("%s-display-%d%s", strings.TrimSuffix(outFile, filepath.Ext(outFile)), d.Index, ext)
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return fmt.Errorf("save display %d: %w", d.Index, err)
		}
		fmt.Fprintf(os.Stderr, "cyrnel: display %d saved to %s\n", d.Index, name)
		return nil
	}
	text := d.Data["text/plain"]
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err := io.WriteString(os.Stdout, text)
	return err
}

// checkEnvironment fails, saying what to do, when the host's active
// environment is not the one the program needs.
func checkEnvironment(ctx context.Context, h *host, want string) error {
	health, err := client.Check(h.api.GetHealthWithResponse(ctx))
	if err != nil {
		return fmt.Errorf("%s: %w", h.url, err)
	}
	active := deref(health.JSON200.Environment)
	switch {
	case active != "" && (want == "" || active == want):
		return nil
	case want == "" || (!h.embedded && active == ""):
		return fmt.Errorf("%s has no active environment: see GET /environment", h.url)
	case !h.embedded:
		return fmt.Errorf("the server's active environment is %s, not %s: switch it with PUT /environment {\"module\": %q} "+
			"(curl -X PUT %s/environment -H 'Authorization: Bearer <key>' -H 'Content-Type: application/json' -d '{\"module\": %q}'), or pass --env %s to run it there anyway",
			active, want, want, h.url, want, active)
	}
	// The embedded host was asked for want and could not activate it.
	var p *client.Problem
	if _, err := client.Check(h.api.GetModuleWithResponse(ctx, want)); errors.As(err, &p) && p.Status == http.StatusNotFound {
		return fmt.Errorf("this cyrnel has no %s environment", want)
	}
	why := "see the log above"
	if e, err := client.Check(h.api.GetEnvironmentWithResponse(ctx)); err == nil && deref(e.JSON200.Error) != "" {
		why = deref(e.JSON200.Error)
	}
	return fmt.Errorf("the %s environment could not be activated: %s", want, why)
}

// waitProcess long-polls until the process is idle.
func waitProcess(ctx context.Context, h *host, pid int64) (*result, error) {
	wait := int64(300000)
	for {
		r, err := client.Check(h.api.WaitProcessWithResponse(ctx, pid, &client.WaitProcessParams{TimeoutMs: &wait}))
		if err != nil {
			return nil, fmt.Errorf("wait for process %d: %w", pid, err)
		}
		if p := r.JSON200; p.State == client.ProcessStateIdle {
			return &result{exitState: string(deref(p.ExitState)), reason: string(deref(p.Reason)), error: p.Error, stdout: p.Stdout, stderr: p.Stderr, output: p.Output}, nil
		}
	}
}

// showRest writes what the stream did not show of a final text.
func showRest(w io.Writer, text string, shown int) {
	if shown < len(text) {
		io.WriteString(w, text[shown:])
	}
}

// writeOutput prints the structured output: to file when given (always),
// else to stdout when there is any, on a line of its own.
func writeOutput(res *result, file string) error {
	out := res.output
	if out == nil {
		out = map[string]any{}
	}
	if file != "" {
		b, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if res.stdout != "" && !strings.HasSuffix(res.stdout, "\n") {
		os.Stdout.WriteString("\n")
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
