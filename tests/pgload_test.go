package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

// restartLoad is load from several clients across hosts: programs that each
// print a token of their own, sent until stop. It signals each answer.
type restartLoad struct {
	hosts []*host
	stop  chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	answers  []tokenAnswer
	statuses map[int]int
	sent     map[string]time.Time // each token's request, when it was sent
	changed  chan struct{}        // a receive follows each new answer
}

// tokenAnswer is one request of the load and what it was answered.
type tokenAnswer struct {
	token  string
	sent   time.Time
	status int // 0: the request itself failed
	p      proc
}

func startRestartLoad(hosts []*host, clients int) *restartLoad {
	l := &restartLoad{hosts: hosts, stop: make(chan struct{}), statuses: map[int]int{}, sent: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	for c := range clients {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				token := fmt.Sprintf("c%d-%d", c, i)
				l.mu.Lock()
				l.sent[token] = time.Now()
				l.mu.Unlock()
				a := postToken(hosts[(c+i)%len(hosts)], token)
				l.mu.Lock()
				a.sent = l.sent[token]
				l.answers = append(l.answers, a)
				l.statuses[a.status]++
				l.mu.Unlock()
				select {
				case l.changed <- struct{}{}:
				default:
				}
				if a.status == http.StatusServiceUnavailable {
					select { // as a client told Retry-After would: not a tight loop
					case <-l.stop:
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	return l
}

// until waits for cond on the counts of answers by status, failing the test
// after limit.
func (l *restartLoad) until(t *testing.T, what string, limit time.Duration, cond func(statuses map[int]int) bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok := cond(l.statuses)
		counts := fmt.Sprint(l.statuses)
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-deadline.C:
			t.Fatalf("%s: not within %v (answers by status: %s)", what, limit, counts)
		}
	}
}

// accepted is how many were answered 201 so far.
func (l *restartLoad) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses[http.StatusCreated]
}

// sentBefore is whether token's request was sent before at.
func (l *restartLoad) sentBefore(token string, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent, ok := l.sent[token]
	return ok && sent.Before(at)
}

// between counts, by status, the answers to requests sent in [from, to).
func (l *restartLoad) between(from, to time.Time) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[int]int{}
	for _, a := range l.answers {
		if !a.sent.Before(from) && a.sent.Before(to) {
			n[a.status]++
		}
	}
	return n
}

// finish stops the clients and returns every answer; a second call returns
// them again.
func (l *restartLoad) finish() []tokenAnswer {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	return l.answers
}

// postToken runs a program printing token through h, waiting for it. The
// program runs in either environment, so the load goes on across a switch.
func postToken(h *host, token string) tokenAnswer {
	return postCode(h, token, polyglot(fmt.Sprintf("import time\ntime.sleep(0.2)\nprint(%q)", token),
		fmt.Sprintf("await new Promise(r => setTimeout(r, 200));\nconsole.log(%q);", token)), 20*time.Second)
}

// postCode runs code through h with token as its ref, waiting up to wait
// for it.
func postCode(h *host, token, code string, wait time.Duration) tokenAnswer {
	body, _ := json.Marshal(map[string]any{"code": code, "ref": token, "waitMs": wait.Milliseconds()})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/processes", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tokenAnswer{token: token}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := tokenAnswer{token: token, status: resp.StatusCode}
	if resp.StatusCode == http.StatusCreated {
		json.Unmarshal(b, &a.p)
	}
	return a
}

// polyglot is one program that runs py in the Python environment and ts in
// the TypeScript one: TypeScript reads the first line as `1` and a comment
// and the Python part as a block comment; Python reads `1 // 1` and a string
// holding the TypeScript part. Neither part may hold `"""` or `*/`.
func polyglot(py, ts string) string {
	return "1 // 1; \"\"\"\n" + ts + "\n/* \"\"\"\n" + py + "\n# */\n"
}

// readiness polls every host's /health/ready until each answers want,
// failing the test after limit.
func readiness(t *testing.T, hosts []*host, want int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i, h := range hosts {
		for {
			st, _ := h.do("GET", "/health/ready", nil, nil)
			if st == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %d: /health/ready answers %d, not %d within %v", i, st, want, limit)
			}
			time.Sleep(100 * time.Millisecond) // polling a condition, not synchronising
		}
	}
}

// allProcesses lists every process through h, page by page.
func allProcesses(t *testing.T, h *host) []proc {
	t.Helper()
	var all []proc
	cursor := ""
	for {
		var page struct {
			Items      []proc `json:"items"`
			NextCursor string `json:"nextCursor"`
			HasMore    bool   `json:"hasMore"`
		}
		path := "/processes?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if st, _ := h.do("GET", path, nil, &page); st != http.StatusOK {
			t.Fatalf("list processes: %d", st)
		}
		all = append(all, page.Items...)
		if !page.HasMore {
			return all
		}
		cursor = page.NextCursor
	}
}
