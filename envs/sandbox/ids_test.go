package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestIDPool: ids go to one holder at a time, in this process and across
// pools on the same lock file (as two servers would hold them); a freed
// id is taken again only after every other free one (next fit); a full
// range says so.
//
// Not parallel: an id's lock is an OFD lock on the pool's file, and a
// child another test forks holds a copy of that file until it execs, so a
// closed pool's ids could stay locked for that long and the last check
// would find the next one instead.
func TestIDPool(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "ids.lock")
	r := IDRange{First: 100000, Count: 3}
	a, b := newIDPool(r, lock), newIDPool(r, lock)
	defer a.close()
	defer b.close()
	held := map[int]bool{}
	take := func(p *idPool) int {
		t.Helper()
		id, err := p.acquire()
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if held[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		if id < r.First || id >= r.First+r.Count {
			t.Fatalf("id %d is outside %+v", id, r)
		}
		held[id] = true
		return id
	}
	x, y := take(a), take(b) // b skips what a's lock holds
	z := take(a)
	for _, p := range []*idPool{a, b} {
		if _, err := p.acquire(); err == nil || !strings.Contains(err.Error(), "held by live sandboxes") {
			t.Fatalf("a full range: %v, want it to say so", err)
		}
	}
	if err := a.release(x); err != nil {
		t.Fatal(err)
	}
	delete(held, x)
	if err := a.release(x); err == nil {
		t.Error("releasing a free id: no error")
	}
	if err := b.release(x); err == nil {
		t.Error("releasing another pool's id: no error")
	}
	// The only free id is x: whichever pool asks gets it.
	if got := take(b); got != x {
		t.Errorf("got %d, want %d, the only free id", got, x)
	}
	if err := a.release(z); err != nil {
		t.Fatal(err)
	}
	if err := b.release(y); err != nil {
		t.Fatal(err)
	}
	delete(held, z)
	delete(held, y)
	// Next fit: a's cursor went past z last, so it tries x (held by b),
	// then y, before z comes round again.
	if got := take(a); got != y {
		t.Errorf("got %d, want %d: the id freed longest ago", got, y)
	}
	// A closed pool (a process that ended) frees its ids for the others.
	a.close()
	delete(held, y)
	if got := take(b); got != y {
		t.Errorf("got %d, want %d, freed by the pool that closed", got, y)
	}
}

func TestIDRangeValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"1879048192:65536", true}, {"65536:1", true},
		{"65535:10", false}, {"0:10", false}, {"100000:0", false},
		{"2147483000:1000", false}, {"100000", false}, {"a:b", false}, {"", false},
	} {
		if _, err := ParseIDRange(c.in); (err == nil) != c.ok {
			t.Errorf("ParseIDRange(%q): %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

// BenchmarkIDs: what a uid costs a sandbox: taking and giving back an id,
// and (as root) switching the host thread's ids around a clone.
func BenchmarkIDs(b *testing.B) {
	b.Run("acquire-release", func(b *testing.B) {
		p := newIDPool(IDRange{First: 100000, Count: 65536}, filepath.Join(b.TempDir(), "ids.lock"))
		defer p.close()
		for b.Loop() {
			id, err := p.acquire()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.release(id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("as-owner", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("switching a thread's ids is a root host's")
		}
		runtime.LockOSThread() // left locked if the ids cannot be given back
		for b.Loop() {
			if err, restored := asOwner(100000, func() error { return nil }); err != nil || !restored {
				b.Fatalf("%v (restored %v)", err, restored)
			}
		}
		runtime.UnlockOSThread()
	})
}
