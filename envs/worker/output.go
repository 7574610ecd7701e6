package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
)

// stderrTail is how much of a probe's stderr an error quotes.
const stderrTail = 4 << 10

// Output runs c once through l, as a worker would run (so in the same
// sandbox as programs), with no input, and returns what it wrote to stdout:
// whatever a host asks of an interpreter (what it is, compiling the
// runtime) runs there, never as the host itself. More than limit bytes of
// output, a failure or ctx ending first is an error quoting the end of its
// stderr.
func Output(ctx context.Context, l Launcher, c Command, limit int64) ([]byte, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", c.Path, err)
	}
	defer null.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", c.Path, err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, fmt.Errorf("run %s: %w", c.Path, err)
	}
	defer errR.Close()
	h, err := l.Launch(ctx, c, Files{Stdout: outW, Stderr: errW, ProtoIn: null, ProtoOut: null, CallIn: null, CallOut: null})
	// The child holds its own copies: the pipes reach end-of-file when it
	// (and whatever it forked) is gone.
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", c.Path, err)
	}
	var stderr bytes.Buffer
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(&stderr, io.LimitReader(errR, stderrTail))
		_, _ = io.Copy(io.Discard, errR)
	}()
	type result struct {
		b   []byte
		err error
	}
	read := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(outR, limit+1))
		if err == nil && int64(len(b)) > limit {
			err = fmt.Errorf("more than %d bytes of output", limit)
		}
		read <- result{b, err}
	}()
	var out result
	select {
	case out = <-read:
	case <-ctx.Done():
		out.err = ctx.Err()
	}
	if out.err != nil {
		h.Kill()
	}
	<-h.Done()
	// Killed, the sandbox leaves no writer behind, so both readers end.
	<-stderrDone
	x := h.Exit()
	switch {
	case out.err != nil:
		return nil, fmt.Errorf("run %s: %w: %s", c.Path, out.err, stderr.Bytes())
	case x.Code != 0 || x.Signal != 0:
		return nil, fmt.Errorf("run %s: %s: %s", c.Path, x, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.b, nil
}
