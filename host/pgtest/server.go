package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Server is a PostgreSQL cluster of a test's own, which the test stops,
// starts and restarts with pg_ctl as an operator would: the database the
// hosts use really goes away (fast: sessions ended and the server shut down
// cleanly; immediate: killed, with crash recovery at the next start).
type Server struct {
	t    testing.TB
	bin  string // the directory of initdb and pg_ctl
	dir  string // the cluster's directory: data/, the socket, the log
	port int
	cred *syscall.Credential // nil: run as this process's user
}

// NewServer initialises and starts a cluster, stopped (immediate) and
// removed with the test. Its binaries are CYRNEL_TEST_PG_BIN or the newest
// of Debian's /usr/lib/postgresql/*/bin (`make test-db` installs them). As
// root, which PostgreSQL refuses to run as, the cluster is the postgres
// user's.
func NewServer(t testing.TB) *Server {
	t.Helper()
	bin, err := binaries()
	if err != nil {
		if reason := os.Getenv("CYRNEL_TEST_NO_POSTGRES"); reason != "" {
			t.Skipf("no PostgreSQL server binaries (CYRNEL_TEST_NO_POSTGRES: %s)", reason)
		}
		t.Fatalf("%v: install Debian's postgresql package (make test-db does) or set CYRNEL_TEST_PG_BIN", err)
	}
	s := &Server{t: t, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the cluster needs the postgres user (Debian's postgresql package makes it): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are root's and closed to the postgres user.
	if s.dir, err = os.MkdirTemp("", "cyrnel-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if s.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	s.run("initdb", "-D", s.data(), "-U", "cyrnel", "--auth=trust", "-E", "UTF8", "--no-sync")
	// In its configuration, so every start has them. fsync off: the
	// machine does not crash in these tests, the server does.
	conf, err := os.OpenFile(filepath.Join(s.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = fmt.Fprintf(conf, "\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n", s.port, s.dir)
		if cerr := conf.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		s.pgctl("stop", "-m", "immediate").Run()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(s.dir, "log")); err == nil {
				t.Logf("PostgreSQL log:\n%s", b)
			}
		}
	})
	return s
}

// URL is the cluster's database, as a superuser.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://cyrnel@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Restart is `pg_ctl restart -m mode`: it returns once the server accepts
// connections again.
func (s *Server) Restart(mode string) {
	s.ctl("restart", "-m", mode, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60")
}

// Stop is `pg_ctl stop -m mode`: it returns once the server is down.
func (s *Server) Stop(mode string) { s.ctl("stop", "-m", mode, "-w", "-t", "60") }

// Start is `pg_ctl start` with the options of the first start: it returns
// once the server accepts connections (after crash recovery, if it was
// stopped immediate).
func (s *Server) Start() {
	s.ctl("start", "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60")
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) ctl(args ...string) {
	s.t.Helper()
	if out, err := s.pgctl(args...).CombinedOutput(); err != nil {
		s.t.Fatalf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (s *Server) pgctl(args ...string) *exec.Cmd {
	return s.command("pg_ctl", append([]string{args[0], "-D", s.data()}, args[1:]...)...)
}

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		s.t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	// pg_ctl start's server outlives the command: it must not hold the
	// output pipes, nor be in the test's process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	return cmd
}

// binaries finds the directory of initdb and pg_ctl.
func binaries() (string, error) {
	if dir := os.Getenv("CYRNEL_TEST_PG_BIN"); dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(found) == 0 {
		return "", fmt.Errorf("no /usr/lib/postgresql/*/bin/pg_ctl")
	}
	version := func(path string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
		return v
	}
	newest := slices.MaxFunc(found, func(a, b string) int { return version(a) - version(b) })
	return filepath.Dir(newest), nil
}

// freePort is a loopback port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
