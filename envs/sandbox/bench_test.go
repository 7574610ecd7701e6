package sandbox

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkSpawn compares starting and reaping `python3 -I -S -c pass` in a
// full sandbox, in a sandbox without namespaces, and as a plain child.
func BenchmarkSpawn(b *testing.B) {
	py := needPython(b)
	argv := []string{py.exe, "-I", "-S", "-c", "pass"}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(argv[0], argv[1:]...)
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name  string
		relax Relax
	}{
		{"sandboxed", Relax{}},
		{"sandboxed-no-namespaces", Relax{Namespaces: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			needLayers(b, c.relax)
			spec := Spec{Argv: argv, ReadPaths: []string{py.prefix}, Relax: c.relax}
			for b.Loop() {
				p, err := Start(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				if e := p.Wait(); e.Code != 0 {
					b.Fatalf("exit %+v", e)
				}
			}
		})
	}
}
