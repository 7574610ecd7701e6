package python

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// TestSessionFiles: a session's workspace through module.SessionFiles, as
// the host's file routes use it: a file written is read back in parts from
// an offset, listed, seen by the session's program, and deleted; a missing
// file and a path out of the workspace are the runtime's *module.FileError.
func TestSessionFiles(t *testing.T) {
	t.Parallel()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: envtest.NewRecorder(), Config: map[string]any{"poolSize": 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Teardown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := e.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	data := bytes.Repeat([]byte("0123456789"), 10)
	if err := s.WriteFile(ctx, "out/data.bin", data); err != nil {
		t.Fatal(err)
	}
	first, err := s.ReadFile(ctx, "out/data.bin", 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := s.ReadFile(ctx, "out/data.bin", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if got := append(first.Data, rest.Data...); !bytes.Equal(got, data) || first.Size != 100 || len(first.Data) != 64 {
		t.Fatalf("read back %q (size %d, first part %d bytes)", got, first.Size, len(first.Data))
	}
	if first.ModifiedAt.IsZero() || !first.ModifiedAt.Equal(rest.ModifiedAt) {
		t.Fatalf("modification times %v and %v", first.ModifiedAt, rest.ModifiedAt)
	}
	if res, _ := s.Execute(ctx, module.ExecutionInput{EID: eids.Add(1), Code: "open('mine.txt', 'w').write(open('out/data.bin').read()[:3])",
		Options: module.Options{TimeoutMs: 20000, OutputLimitBytes: 1 << 20}}); res.Exit != module.ExitSuccess {
		t.Fatalf("program: %+v", res)
	}
	files, err := s.ListFiles(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Path != "mine.txt" || files[0].Size != 3 || files[1].Path != "out/data.bin" || files[1].Size != 100 ||
		time.Since(files[1].ModifiedAt).Abs() > time.Minute {
		t.Fatalf("listed %+v", files)
	}
	if files, err := s.ListFiles(ctx, 1); err != nil || len(files) != 1 {
		t.Fatalf("listed at most 1: %+v %v", files, err)
	}
	if err := s.DeleteFile(ctx, "out/data.bin"); err != nil {
		t.Fatal(err)
	}

	var fe *module.FileError
	if _, err := s.ReadFile(ctx, "out/data.bin", 0, 64); !errors.As(err, &fe) || !fe.NotFound {
		t.Fatalf("read of a deleted file: %v", err)
	}
	if err := s.DeleteFile(ctx, "out/data.bin"); !errors.As(err, &fe) || !fe.NotFound {
		t.Fatalf("delete of a deleted file: %v", err)
	}
	for _, escape := range []string{"../outside.txt", "/etc/passwd"} {
		if err := s.WriteFile(ctx, escape, []byte("x")); !errors.As(err, &fe) || fe.NotFound || fe.Message == "" {
			t.Fatalf("write to %s: %v", escape, err)
		}
	}
}
