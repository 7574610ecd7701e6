package sandbox

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
)

// HelperName is the small helper binary the host re-executes as the sandbox
// helper when it sits next to the running binary: it links only this
// package, so a helper start skips the server's package initialisation
// (jsonschema, huma, goja… about 10 ms per start).
const HelperName = "cyrnel-sandbox"

// helperExe is what the host re-executes as the helper: HelperName next to
// the running binary if it was built from the same source, else the running
// binary itself. (Stages started inside a sandbox re-execute their own
// binary, selfExe: the host's paths do not exist there.)
var helperExe = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return selfExe
	}
	candidate := filepath.Join(filepath.Dir(exe), HelperName)
	if candidate == exe || !sameBuild(candidate) {
		return selfExe
	}
	return candidate
})

// sameBuild reports whether the binary at path was built from the source
// this one was: same module version, VCS revision and state, and the same
// dependency versions. A stale helper would speak an older protocol.
func sameBuild(path string) bool {
	own, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	other, err := buildinfo.ReadFile(path)
	if err != nil {
		return false
	}
	if own.GoVersion != other.GoVersion || own.Main.Version != other.Main.Version || own.Main.Sum != other.Main.Sum {
		return false
	}
	vcs := func(bi *debug.BuildInfo) []debug.BuildSetting {
		var s []debug.BuildSetting
		for _, b := range bi.Settings {
			if b.Key == "vcs.revision" || b.Key == "vcs.time" || b.Key == "vcs.modified" {
				s = append(s, b)
			}
		}
		return s
	}
	if !slices.Equal(vcs(own), vcs(other)) {
		return false
	}
	deps := map[string]string{}
	for _, d := range own.Deps {
		deps[d.Path] = d.Version
	}
	for _, d := range other.Deps {
		if v, ok := deps[d.Path]; ok && v != d.Version {
			return false
		}
	}
	return true
}
