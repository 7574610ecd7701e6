package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// TestSessionsAndProcessFilesOnEveryDialect: sessions are stored, updated
// only while not ended, listed newest first with a cursor and ended for
// their host at start-up; a process's files are replaced, listed without
// content, read, and deleted with the process.
func TestSessionsAndProcessFilesOnEveryDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			at := time.Now().UTC().Truncate(time.Millisecond)
			for i, id := range []string{"ses_a", "ses_b", "ses_c"} {
				s := &Session{ID: id, Module: "python", State: "ready", IdleTimeoutMs: 1, MaxLifetimeMs: 2, HostID: []string{"h1", "h1", "h2"}[i],
					CreatedAt: at.Add(time.Duration(i) * time.Second), LastUsedAt: at, EnvConfig: map[string]any{"k": "v"}}
				if err := st.InsertSession(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			cpu := int64(7)
			if ok, err := st.UpdateSession(ctx, &Session{ID: "ses_a", State: "busy", CPUMs: &cpu}, "state", "cpu_ms"); !ok || err != nil {
				t.Fatalf("update: %v %v", ok, err)
			}
			if n, err := st.EndHostSessions(ctx, "h1", "host_restart", at); n != 2 || err != nil {
				t.Fatalf("end h1's sessions: %d %v", n, err)
			}
			if ok, err := st.UpdateSession(ctx, &Session{ID: "ses_a", State: "ready"}, "state"); ok || err != nil {
				t.Fatalf("an ended session changed: %v %v", ok, err)
			}
			got, err := st.GetSession(ctx, "ses_a")
			if err != nil || got.State != SessionEnded || got.EndReason != "host_restart" || *got.CPUMs != 7 || got.EnvConfig["k"] != "v" {
				t.Fatalf("ses_a: %+v %v", got, err)
			}
			if _, err := st.GetSession(ctx, "ses_x"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing session: %v", err)
			}
			page, err := st.ListSessions(ctx, SessionFilter{Limit: 2})
			if err != nil || len(page) != 2 || page[0].ID != "ses_c" || page[1].ID != "ses_b" {
				t.Fatalf("first page: %+v %v", page, err)
			}
			page, err = st.ListSessions(ctx, SessionFilter{Limit: 2, BeforeTime: &page[1].CreatedAt, BeforeID: page[1].ID})
			if err != nil || len(page) != 1 || page[0].ID != "ses_a" {
				t.Fatalf("second page: %+v %v", page, err)
			}
			if ended, err := st.ListSessions(ctx, SessionFilter{Limit: 10, State: SessionEnded}); err != nil || len(ended) != 2 {
				t.Fatalf("ended: %+v %v", ended, err)
			}

			p := &Process{Code: "x", State: "idle", CreatedAt: at, Session: "ses_c"}
			write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
			big := bytes.Repeat([]byte("0123456789abcdef"), (FilePartBytes*5/2)/16) // two parts and a half
			for _, files := range [][]ProcessFile{
				{{PID: p.PID, Path: "old.txt", Size: 1, ModifiedAt: at, Content: []byte("o")}},
				{{PID: p.PID, Path: "a/b.csv", Size: 3, ModifiedAt: at, Content: []byte("x,y")}, {PID: p.PID, Path: "c.bin", Size: 2, ModifiedAt: at, Content: []byte{0, 255}},
					{PID: p.PID, Path: "d.big", Size: int64(len(big)), ModifiedAt: at, Content: big}},
			} {
				write(t, st, func(tx *Tx) error {
					return tx.ReplaceProcessFiles(ctx, p.PID, files, func(i int) io.Reader { return bytes.NewReader(files[i].Content) })
				})
			}
			list, err := st.ListProcessFiles(ctx, p.PID)
			if err != nil || len(list) != 3 || list[0].Path != "a/b.csv" || list[1].Path != "c.bin" || list[1].Size != 2 || list[0].Content != nil {
				t.Fatalf("files: %+v %v", list, err)
			}
			for path, want := range map[string][]byte{"c.bin": {0, 255}, "d.big": big} {
				f, r, err := st.OpenProcessFile(ctx, p.PID, path)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, want) || f.Size != int64(len(want)) {
					t.Fatalf("%s: %d bytes (size %d), want %d: %v", path, len(got), f.Size, len(want), err)
				}
			}
			var parts int
			if err := st.DB.NewSelect().Model((*processFilePart)(nil)).ColumnExpr("count(*)").Where("pid = ? AND path = 'd.big'", p.PID).Scan(ctx, &parts); err != nil || parts != 3 {
				t.Fatalf("d.big in %d parts (%v), want 3", parts, err)
			}
			if got, err := st.GetProcess(ctx, p.PID); err != nil || got.Session != "ses_c" {
				t.Fatalf("process session: %+v %v", got, err)
			}
			write(t, st, func(tx *Tx) error { _, err := tx.DeleteProcess(ctx, p.PID, []string{"idle"}); return err })
			if _, _, err := st.OpenProcessFile(ctx, p.PID, "c.bin"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a deleted process's file: %v", err)
			}
		})
	}
}
