package tests

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// noBrowser names the opt-out for machines that cannot have Chromium: its
// value says why. Without it a missing browser fails the console tests.
const noBrowser = "CYRNEL_TEST_NO_BROWSER"

// browser starts headless Chromium with a fresh profile and records every
// URL the pages request.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) (context.Context, *requests) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if why := os.Getenv(noBrowser); why != "" {
			t.Skipf("%s: %s", noBrowser, why)
		}
		t.Fatalf("the console tests need Chromium (apt-get install chromium; make test installs it on Debian as root), "+
			"or %s=<why> to run without them: %v", noBrowser, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	reqs := &requests{}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			reqs.add(e.Request.URL)
		}
	}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, reqs
}

type requests struct {
	mu   sync.Mutex
	urls []string
}

func (r *requests) add(u string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, u)
}

func (r *requests) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

// screenshots is where the tests leave a picture of each page, for people
// to look at: $CYRNEL_SCREENSHOTS, or tests/screenshots (git-ignored).
func screenshots(t *testing.T) string {
	dir := os.Getenv("CYRNEL_SCREENSHOTS")
	if dir == "" {
		dir = "screenshots"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// unnamedControls lists the page's visible controls that have no accessible
// name (no aria-label, label, text or title).
const unnamedControls = `[...document.querySelectorAll("button, input, select, textarea, a[href], summary")]
	.filter((e) => e.getClientRects().length > 0)
	.filter((e) => !(e.getAttribute("aria-label") || [...(e.labels || [])].map((l) => l.textContent).join("") ||
		(e.tagName === "INPUT" ? "" : e.textContent) || e.title || "").trim())
	.map((e) => e.outerHTML.slice(0, 160))`

// shoot saves the page at desktop and at phone width: the whole page, or
// (long pages such as the reference) what the screen shows.
func shoot(t *testing.T, ctx context.Context, name string, whole bool) {
	t.Helper()
	dir := screenshots(t)
	if !strings.HasSuffix(name, "docs") {
		unnamed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](unnamedControls))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range unnamed {
			t.Errorf("%s: a control without an accessible name: %s", name, c)
		}
	}
	for _, size := range []struct {
		suffix        string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		viewport := []chromedp.EmulateViewportOption{}
		if size.mobile {
			viewport = append(viewport, chromedp.EmulateMobile)
		}
		png, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
			if _, err := chromedp.EmulateViewport(size.width, size.height, viewport...)(ctx, tg); err != nil {
				return nil, err
			}
			if whole {
				return chromedp.FullScreenshot(100)(ctx, tg)
			}
			return chromedp.CaptureScreenshot()(ctx, tg)
		})
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s.png", name, size.suffix)), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
}

// do runs browser steps, failing rather than hanging when one never ends.
func do(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// wait polls a JavaScript predicate until it holds.
func wait(t *testing.T, ctx context.Context, what, predicate string) {
	t.Helper()
	if err := do(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, body)
	}
}

// eval runs JavaScript in the page for its effect (setting a select and
// telling the page, as a person's choice would).
func eval(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if err := do(ctx, chromedp.Evaluate[chromedp.Void](js)); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestConsole drives the console as an operator would, in headless
// Chromium against the built binary: give the key, run a program and watch
// its output arrive, kill it, import a service and find a tool, switch the
// environment, read the API reference. Nothing may be fetched from another
// origin, and the key never appears in a URL.
func TestConsole(t *testing.T) {
	const key = "console-test-key"
	h := start(t, "", "CYRNEL_API_KEY="+key)
	ctx, reqs := browser(t)

	// The console loads without the key; the first API call answers 401
	// and the console asks for it.
	if err := do(ctx, chromedp.Navigate(h.base+"/")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the key prompt", `document.querySelector("#key-dialog").open`)
	shoot(t, ctx, "0-key", true)
	// A wrong key is refused and asked for again.
	if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#key-input"), "wrong"), chromedp.Click(chromedp.CSS("#key-save"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the prompt again", `document.querySelector("#key-dialog").open && /refused/.test(document.querySelector("#key-why").textContent)`)
	if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#key-input"), key), chromedp.Click(chromedp.CSS("#key-save"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the process list", `!document.querySelector("#key-dialog").open && document.querySelector("table[aria-label=Processes] tbody") !== null && /No processes/.test(document.body.innerText)`)
	// Approvals show in the menu exactly when the API has them.
	status, _ := h.do("GET", "/approvals?limit=1", nil, nil)
	wait(t, ctx, "the approvals probe", fmt.Sprintf(`document.querySelector("#nav-approvals").dataset.checked === "true" && document.querySelector("#nav-approvals").hidden === %t`, status == 404))
	wait(t, ctx, "the key kept in this tab only", `sessionStorage.getItem("cyrnel.apiKey") === "`+key+`" && localStorage.length === 0`)

	t.Run("run and watch stdout live, then kill", func(t *testing.T) {
		program := "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\nprint('waiting', flush=True)\ntime.sleep(120)\nprint('never')\n"
		if err := do(ctx, chromedp.Navigate(h.base+"/#/run"), chromedp.WaitVisible(chromedp.CSS("#code")), chromedp.SetValue(chromedp.CSS("#code"), program)); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the environment's guide", `/cyrnel\.output/.test(document.querySelector("details")?.textContent || "")`)
		// Tab in the editor indents instead of moving the focus away.
		if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#code"), "\t")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "Tab to indent", fmt.Sprintf(`document.querySelector("#code").value.length === %d && document.activeElement.id === "code"`, len(program)+4))
		if err := do(ctx, chromedp.SetValue(chromedp.CSS("#code"), program), chromedp.SendKeys(chromedp.CSS("#run-ref"), "console-e2e"), chromedp.Click(chromedp.CSS("#run"))); err != nil {
			t.Fatal(err)
		}
		// Output that arrives while the program still runs came live: the
		// program cannot end on its own before the kill below.
		wait(t, ctx, "stdout while running", `/tick 0\ntick 1\ntick 2\nwaiting/.test(document.querySelector("#stdout")?.textContent || "") && document.querySelector('[data-field="state"]')?.textContent === "running"`)
		var p []proc
		var list struct{ Items []proc }
		h.do("GET", "/processes?ref=console-e2e", nil, &list)
		p = list.Items
		if len(p) != 1 || p[0].State != "running" {
			t.Fatalf("the API sees %+v, want one running process", p)
		}
		shoot(t, ctx, "1-run", true)
		if err := do(ctx, chromedp.Click(chromedp.CSS("#kill"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the kill", `document.querySelector('[data-field="exit"]')?.textContent === "canceled" && document.querySelector('[data-field="reason"]')?.textContent === "killed"`)
		if out := text(t, ctx, "#stdout"); strings.Contains(out, "never") {
			t.Errorf("stdout after the kill: %q", out)
		}
		var got proc
		h.do("GET", fmt.Sprintf("/processes/%d", p[0].PID), nil, &got)
		if got.ExitState == nil || *got.ExitState != "canceled" {
			t.Fatalf("after the console's kill the API says %+v", got)
		}

		// The list shows it, and its filter finds it by exit state.
		if err := do(ctx, chromedp.Navigate(h.base+"/#/processes")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the process in the list", fmt.Sprintf(`document.querySelector('tr[data-pid="%d"]')?.textContent.includes("canceled")`, got.PID))
		eval(t, ctx, `(() => { const s = document.querySelector("select[name=exitState]"); s.value = "success"; s.dispatchEvent(new Event("input")); })()`)
		wait(t, ctx, "the filter", fmt.Sprintf(`!document.querySelector('tr[data-pid="%d"]') && /No processes match/.test(document.body.innerText)`, got.PID))
		eval(t, ctx, `(() => { const s = document.querySelector("select[name=exitState]"); s.value = "canceled"; s.dispatchEvent(new Event("input")); })()`)
		wait(t, ctx, "the filter", fmt.Sprintf(`document.querySelector('tr[data-pid="%d"]') !== null`, got.PID))
		shoot(t, ctx, "2-processes", true)

		// A process that appears after the page loaded shows without reload.
		var fresh proc
		h.do("POST", "/processes", map[string]any{"code": "print('hi')\ncyrnel.output({'answer': 42, 'nested': {'list': [1, 2]}})", "ref": "later"}, &fresh)
		eval(t, ctx, `(() => { const s = document.querySelector("select[name=exitState]"); s.value = ""; s.dispatchEvent(new Event("input")); })()`)
		wait(t, ctx, "a new process", fmt.Sprintf(`document.querySelector('tr[data-pid="%d"]')?.textContent.includes("success")`, fresh.PID))
		if err := do(ctx, chromedp.Navigate(fmt.Sprintf("%s/#/processes/%d", h.base, fresh.PID))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the process page", `/hi/.test(document.querySelector("#stdout")?.textContent || "") && document.querySelector('[data-field="exit"]')?.textContent === "success"`)
		wait(t, ctx, "the output tree", `/answer: 42/.test(document.querySelector("#output").innerText) && /list: \[2\]/.test(document.querySelector("#output").innerText)`)
		shoot(t, ctx, "3-process", true)
		if err := do(ctx, chromedp.Click(chromedp.CSS("#rerun"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the re-run", `document.querySelector('[data-field="runs"]')?.textContent === "2" && document.querySelector('[data-field="exit"]')?.textContent === "success" && /hi/.test(document.querySelector("#stdout").textContent)`)
		// Delete asks first; the test answers yes.
		eval(t, ctx, `window.confirm = () => true`)
		if err := do(ctx, chromedp.Click(chromedp.CSS("#delete"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the delete", `location.hash === "#/processes"`)
		if status, _ := h.do("GET", fmt.Sprintf("/processes/%d", fresh.PID), nil, nil); status != 404 {
			t.Errorf("after the console's delete the process answers %d", status)
		}
	})

	t.Run("import a service and find a tool", func(t *testing.T) {
		doc, err := filepath.Abs("testdata/petstore-3.0.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if err := do(ctx, chromedp.Navigate(h.base+"/#/services"), chromedp.WaitVisible(chromedp.CSS("#svc-id")),
			chromedp.SendKeys(chromedp.CSS("#svc-id"), "petstore"), chromedp.SetUploadFiles(chromedp.CSS("#svc-file"), []string{doc}),
			chromedp.Click(chromedp.CSS("#svc-import"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the import", `/Imported petstore: 3 tools/.test(document.querySelector("#svc-import + .feedback")?.textContent)`)
		if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#tool-q"), "showPet")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the search", `[...document.querySelectorAll("#tool-results a")].some((a) => a.textContent === "petstore.showPetById")`)
		shoot(t, ctx, "4-services", true)
		eval(t, ctx, `document.querySelector('#tool-results a[href="#/tools/petstore/showPetById"]').click()`)
		wait(t, ctx, "the tool's docs", `/showPetById/.test(document.querySelector("#tool-docs")?.textContent || "") && document.querySelector("#tool-docs pre") !== null`)
		shoot(t, ctx, "5-tool", true)
		if err := do(ctx, chromedp.Click(chromedp.CSS(`input[aria-label="Enable tool showPetById"]`))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the tool disabled", `document.querySelector('label:has(input[aria-label="Enable tool showPetById"]) + .feedback')?.textContent === "tool showPetById: disabled."`)
		var tool struct{ Enabled bool }
		h.do("GET", "/tools/petstore/showPetById", nil, &tool)
		if tool.Enabled {
			t.Error("unchecking Enabled left the tool enabled")
		}

		// Config: a bad value is refused with the field named; a good one is
		// stored.
		if err := do(ctx, chromedp.Navigate(h.base+"/#/services/petstore"), chromedp.WaitVisible(chromedp.CSS("#cfg-save"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the config fields", `/serverUrl/.test(document.body.innerText) && document.querySelector("#cfg").value.trim() === "{}"`)
		if err := do(ctx, chromedp.SetValue(chromedp.CSS("#cfg"), `{"timeoutMs": 0}`), chromedp.Click(chromedp.CSS("#cfg-save"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the refusal", `document.querySelector("#cfg-save + .feedback")?.classList.contains("error") && /timeoutMs/.test(document.querySelector("#cfg-save + .feedback").textContent)`)
		if err := do(ctx, chromedp.SetValue(chromedp.CSS("#cfg"), `{"timeoutMs": 5000}`), chromedp.Click(chromedp.CSS("#cfg-save"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the config saved", `document.querySelector("#cfg-save + .feedback")?.textContent === "Config saved."`)
		var cfg map[string]any
		h.do("GET", "/services/petstore/config", nil, &cfg)
		if cfg["timeoutMs"] != float64(5000) {
			t.Errorf("after the console saved the config the API says %v", cfg)
		}
		shoot(t, ctx, "5-service", true)
	})

	t.Run("switch the environment", func(t *testing.T) {
		if err := do(ctx, chromedp.Navigate(h.base+"/#/environment")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the environment", `document.querySelector("#env")?.dataset.active === "python" && document.querySelector('#env-module option[value=typescript]') !== null`)
		// The sandbox is described in words: "network": false is shown as
		// the network being blocked.
		if body := text(t, ctx, "#env"); !strings.Contains(body, "blocked: programs have no network") {
			t.Errorf("the environment page does not say the network is blocked:\n%s", body)
		}
		shoot(t, ctx, "6-environment", true)
		eval(t, ctx, `document.querySelector("#env-module").value = "typescript"`)
		if err := do(ctx, chromedp.Click(chromedp.CSS("#env-switch"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the switch", `document.querySelector("#env")?.dataset.active === "typescript"`)
		var env struct {
			Active struct{ Module string }
		}
		h.do("GET", "/environment", nil, &env)
		if env.Active.Module != "typescript" {
			t.Fatalf("after the console's switch the API says %q is active", env.Active.Module)
		}
	})

	// What programs and documents write reaches the page as text: tool docs
	// (Markdown) and HTML displays (a DataFrame's table) with markup that
	// would run script if parsed into the page.
	t.Run("program-made content stays text", func(t *testing.T) {
		const hostile = `<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>`
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(async () => {
			const md = markdown("# Title %[1]s\n\n| a | b |\n| - | - |\n| %[1]s | **x** |\n\ntext %[1]s `+"`code`"+`");
			// A script's text stays in its cell as text.
			const tables = await htmlTables("<table><tr><th>k</th><th>v</th></tr><tr><td>%[1]s one</td><td>2</td></tr></table>%[1]s");
			document.querySelector("#main").append(md, ...tables);
			return JSON.stringify({md: md.querySelectorAll("img, script").length, tables: tables.length,
				cells: tables[0].querySelectorAll("img, script").length, text: tables[0].rows[1].cells[0].textContent,
				head: md.querySelector("h3").textContent, mdTable: md.querySelectorAll("table td").length});
		})()`, strings.ReplaceAll(hostile, `"`, `\"`)), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		want := `{"md":0,"tables":1,"cells":0,"text":"window.pwned=1 one","head":"Title ` + strings.ReplaceAll(hostile, `"`, `\"`) + `","mdTable":2}`
		if got != want {
			t.Errorf("rendered:\n%s\nwant\n%s", got, want)
		}
		wait(t, ctx, "a moment for any handler to run", `document.readyState === "complete"`)
		if pwned, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1`)); pwned {
			t.Error("markup from a program ran in the console")
		}
	})

	t.Run("API reference offline", func(t *testing.T) {
		if err := do(ctx, chromedp.Navigate(h.base+"/docs")); err != nil {
			t.Fatal(err)
		}
		// Redoc rendered the spec: operations are listed by summary.
		wait(t, ctx, "the reference", `/Follow a process as Server-Sent Events/.test(document.body.innerText)`)
		shoot(t, ctx, "7-docs", false)
	})

	base, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range reqs.all() {
		if strings.Contains(u, key) {
			t.Errorf("the key went into a URL: %s", u)
		}
		p, err := url.Parse(u)
		if err != nil {
			t.Errorf("request to %q: %v", u, err)
			continue
		}
		if p.Scheme != "data" && p.Scheme != "blob" && p.Host != base.Host {
			t.Errorf("the console fetched %s from outside the server", u)
		}
	}
}
