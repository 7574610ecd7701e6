package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDataScienceWalk runs examples/datascience_walk.py, the walk of a
// data-science agent (issue 25) as a script an agent would run, against the
// built server on Debian's interpreter with pandas and matplotlib: the
// guide, a session that keeps a DataFrame, a CSV uploaded, describe() as
// HTML, a figure as a PNG display and a file, downloads, a kill that keeps
// the session. The script says which step failed.
func TestDataScienceWalk(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	h := start(t, "", "CYRNEL_PYTHON="+py)
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{"asyncio", "pandas", "matplotlib"}}, nil); st != 200 {
		t.Fatalf("preload pandas and matplotlib: %d", st)
	}
	cmd := exec.Command(py, "../examples/datascience_walk.py")
	cmd.Env = []string{"CYRNEL_URL=" + h.base, "CYRNEL_API_KEY=" + h.key}
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.HasSuffix(string(out), "the walk passed\n") {
		t.Fatalf("the walk: %v", err)
	}
}
