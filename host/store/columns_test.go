package store

import (
	"reflect"
	"testing"

	"github.com/uptrace/bun/dialect/sqlitedialect"
)

// TestColumnNamesAreTheModels: every column name the domain packages write
// by is a column of its model, so a renamed field cannot leave a write
// naming a column that is gone.
func TestColumnNamesAreTheModels(t *testing.T) {
	t.Parallel()
	tables := sqlitedialect.New().Tables()
	for typ, cols := range map[reflect.Type][]string{
		reflect.TypeFor[Process](): {ProcState, ProcExitState, ProcReason, ProcError, ProcOutput, ProcStdout, ProcStderr, ProcStdoutTruncated,
			ProcStderrTruncated, ProcOutputTruncated, ProcStartedAt, ProcFinishedAt, ProcDurationMs, ProcCPUMs, ProcPeakMemoryBytes,
			ProcEnvironment, ProcRuns, ProcHostID, ProcDisplays, ProcTraceID},
		reflect.TypeFor[Session](): {SesState, SesLastUsedAt, SesEndReason, SesEndedAt, SesCPUMs, SesMemoryBytes},
	} {
		table := tables.Get(typ)
		for _, c := range cols {
			if !table.HasField(c) {
				t.Errorf("%s has no column %q", table.Name, c)
			}
		}
	}
}
