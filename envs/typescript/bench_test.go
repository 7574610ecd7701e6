package typescript

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// discard is a host that answers instantly and keeps nothing.
type discard struct{}

func (discard) InvokeTool(_ context.Context, in module.InvokeInput) (any, error) {
	return in.Parameters, nil
}
func (discard) ListTools(context.Context) ([]module.Tool, error) { return testTools, nil }
func (discard) SetState(int64, module.ExecState)                 {}
func (discard) SetError(int64, string)                           {}
func (discard) EmitStdout(int64, []byte)                         {}
func (discard) EmitStderr(int64, []byte)                         {}
func (discard) EmitOutput(int64, map[string]json.RawMessage)     {}

const trivialProgram = `const x: number = 40 + 2;
console.log("x is", x);
cyrnel.output({ x });
`

// BenchmarkExecuteTrivial is a trivial program end to end through Execute:
// queueing, a fresh runtime, a cached program, console and output.
func BenchmarkExecuteTrivial(b *testing.B) {
	benchmarkExecute(b, trivialProgram)
}

// BenchmarkExecuteToolCall adds one awaited tool call.
func BenchmarkExecuteToolCall(b *testing.B) {
	benchmarkExecute(b, `const r = await cyrnel.services.t.tools.echo.invoke({ a: 1 }); cyrnel.output({ r });`)
}

func benchmarkExecute(b *testing.B, code string) {
	env := New(nil)
	if err := env.Setup(context.Background(), module.SetupContext{Bindings: discard{}}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := module.ExecutionInput{Code: code, Options: module.Options{TimeoutMs: 5000}}
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in.EID = int64(i + 1)
		start := time.Now()
		res, err := env.Execute(ctx, in)
		durations = append(durations, time.Since(start))
		if err != nil || res.Exit != module.ExitSuccess {
			b.Fatalf("execute: %+v, %v", res, err)
		}
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
}

func BenchmarkTransform(b *testing.B) {
	b.Run("hit", func(b *testing.B) {
		e := NewEngine(Options{})
		if _, err := e.compile(trivialProgram); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := e.compile(trivialProgram); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		e := NewEngine(Options{})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := e.compile(trivialProgram + "// " + strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
