package openapi

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/adapters"
)

const heapMetric = "/memory/classes/heap/objects:bytes"

// heapSampler records the largest heap (live and not yet collected objects)
// seen while it runs. runtime/metrics reads it without stopping the world.
type heapSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), peak: heapNow()}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				h.peak = max(h.peak, heapNow())
			}
		}
	}()
	return h
}

// Stop ends sampling and returns the peak.
func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	h.done.Wait()
	return max(h.peak, heapNow())
}

// BenchmarkImport imports each fixture (Definition from inline content:
// parse, convert, build every tool). Besides time and allocations it
// reports the peak heap growth during one import over the heap before it
// (peak-heap-MB), the size of the definition produced (def-MB: schemas and
// domains, what the host stores) and the number of tools.
func BenchmarkImport(b *testing.B) {
	names := make([]string, 0, len(fixtureTools))
	for n := range fixtureTools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		data := readFixture(b, name)
		b.Run(name, func(b *testing.B) {
			a := New(Options{})
			src := adapters.Source{Content: string(data)}
			var peak uint64
			var def adapters.ServiceDefinition
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				base := heapNow()
				h := startHeapSampler()
				b.StartTimer()
				var err error
				def, err = a.Definition(context.Background(), src)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if p := h.Stop(); p > base {
					peak = max(peak, p-base)
				}
				b.StartTimer()
			}
			size := len(def.ConfigSchema) + len(def.SecretsSchema) + len(def.AdapterDomain)
			for _, t := range def.Tools {
				size += len(t.InputSchema) + len(t.OutputSchema) + len(t.AdapterDomain)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(size)/(1<<20), "def-MB")
			b.ReportMetric(float64(len(def.Tools)), "tools")
		})
	}
}
