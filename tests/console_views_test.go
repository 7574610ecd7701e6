package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// watchCSP records Content-Security-Policy violations (the DOM event, in
// every document the tab loads) and the errors the console logs.
func watchCSP(t *testing.T, ctx context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError && (e.Entry.Source == log.EntrySourceSecurity || strings.Contains(e.Entry.Text, "Content Security Policy")) {
				seen = append(seen, "log: "+e.Entry.Text)
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				seen = append(seen, "console.error: "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			seen = append(seen, "exception: "+e.ExceptionDetails.Text)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := do(ctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `document.addEventListener("securitypolicyviolation",
				(e) => console.error("securitypolicyviolation", e.violatedDirective, e.sample), true)`})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// inView is a JavaScript predicate: the first element matching the CSS
// selector whose text matches the pattern is inside the viewport.
func inView(sel, pattern string) string {
	return fmt.Sprintf(`(() => {
		const e = [...document.querySelectorAll(%q)].find((e) => /%s/.test(e.textContent));
		if (!e) return false;
		const r = e.getBoundingClientRect();
		return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight + 1; // + 1: the layout's fractions of a pixel
	})()`, sel, pattern)
}

// shootAsIs saves what the screen shows now, at the size and scroll it has.
func shootAsIs(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(screenshots(t), name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleAtHand checks what issue 27 found in the console: the result
// of an action shows where the person is looking (next to the button, in
// view), no page scrolls sideways at phone width, a DataFrame display
// breaks no Content-Security-Policy rule, and sessions are visible (a
// sessions page, a session's page that ends it and lists its files, the
// session on its processes' pages).
func TestConsoleAtHand(t *testing.T) {
	py := dataSciencePython(t)
	const key = "console-test-key"
	h := start(t, "", "CYRNEL_API_KEY="+key, "CYRNEL_PYTHON="+py)
	ses := h.newSession(map[string]any{"ref": "analysis"})
	if st, _, b := h.raw("PUT", "/sessions/"+ses.ID+"/files/data%2Fsales.csv", "text/csv", []byte("city,sales\nParis,3\n")); st != http.StatusNoContent {
		t.Fatalf("upload: %d %s", st, b)
	}
	df := h.run("import pandas as pd\ndf = pd.DataFrame({'city': ['Paris', 'Lyon'], 'sales': [3, 4]})\ndf", session(ses.ID))
	if df.exit() != "success" || len(h.displays(df.PID)) != 1 {
		t.Fatalf("the DataFrame run: %s %s", df.exit(), df.Stderr)
	}

	// Sandboxed frames run in the page's process, so the page's log has
	// what happens in the console's frames too.
	ctx, _ := browser(t, chromedp.Flag("disable-features", "IsolateSandboxedIframes"), chromedp.Flag("disable-site-isolation-trials", true))
	problems := watchCSP(t, ctx)
	if err := do(ctx, chromedp.Navigate(h.base+"/")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the key prompt", `document.querySelector("#key-dialog").open`)
	if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#key-input"), key), chromedp.Click(chromedp.CSS("#key-save"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the process list", `document.querySelector("#key-button").textContent.includes("admin")`)

	t.Run("a DataFrame display breaks no CSP rule; the process shows its session", func(t *testing.T) {
		if err := do(ctx, chromedp.Navigate(fmt.Sprintf("%s/#/processes/%d", h.base, df.PID))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the DataFrame's table", `[...document.querySelectorAll("figure.display table td")].some((td) => td.textContent === "Lyon")`)
		// The display also arrives live, through the event stream: re-run
		// it and watch it come.
		if err := do(ctx, chromedp.Click(chromedp.CSS("#rerun"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the re-run's table", `document.querySelector('[data-field="runs"]')?.textContent === "2" && [...document.querySelectorAll("figure.display table td")].some((td) => td.textContent === "Lyon")`)
		shoot(t, ctx, "views-1-dataframe", true)
		for _, p := range problems() {
			t.Errorf("while showing a DataFrame: %s", p)
		}
		wait(t, ctx, "the session link", fmt.Sprintf(`document.querySelector('[data-field="session"] a[href="#/sessions/%s"]') !== null`, ses.ID))
	})

	t.Run("sessions page and a session's page", func(t *testing.T) {
		if err := do(ctx, chromedp.Navigate(h.base+"/#/sessions")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the session in the list", fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-session="%s"]'); return !!r && /ready/.test(r.textContent) && /analysis/.test(r.textContent) && /python/.test(r.textContent); })()`, ses.ID))
		shoot(t, ctx, "views-2-sessions", true)
		eval(t, ctx, fmt.Sprintf(`document.querySelector('tr[data-session="%s"] a').click()`, ses.ID))
		wait(t, ctx, "the session's page", fmt.Sprintf(`location.hash === "#/sessions/%s" && /data\/sales\.csv/.test(document.querySelector("#session-files")?.textContent || "") && document.querySelector('a[href="#/processes/%d"]') !== null && /admin|bootstrap/.test(document.querySelector('[data-field="owner"]')?.textContent || "")`, ses.ID, df.PID))
		shoot(t, ctx, "views-3-session", true)
		eval(t, ctx, `window.confirm = () => true`)
		if err := do(ctx, chromedp.Click(chromedp.CSS("#session-end"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the end, said next to the button", `document.querySelector('[data-field="state"]')?.textContent === "ended" && `+inView(".feedback", "Session ended"))
		var got sessionView
		h.do("GET", "/sessions/"+ses.ID, nil, &got)
		if got.State != "ended" {
			t.Errorf("after the console ended it the API says %+v", got)
		}
	})

	// At phone width the services page is long and its Import button far
	// below the top: its result must show where the button is.
	if err := do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	t.Run("feedback next to the action", func(t *testing.T) {
		doc := "testdata/petstore-3.0.yaml"
		abs, err := filepath.Abs(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := do(ctx, chromedp.Navigate(h.base+"/#/services"), chromedp.WaitVisible(chromedp.CSS("#svc-id")),
			chromedp.SendKeys(chromedp.CSS("#svc-id"), "petstore"), chromedp.SetUploadFiles(chromedp.CSS("#svc-file"), []string{abs}),
			chromedp.Click(chromedp.CSS("#svc-import"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the import's result", `[...document.querySelectorAll("[role=status]")].some((e) => /Imported petstore: 3 tools/.test(e.textContent))`)
		// The control: the page did scroll to reach the button, so a
		// message at the top would be out of view.
		wait(t, ctx, "the page scrolled to the button", `scrollY > 0`)
		wait(t, ctx, "the import's result in view", inView("[role=status]", "Imported petstore: 3 tools"))
		shootAsIs(t, ctx, "views-4-import-phone")

		// A refusal shows next to its form as well.
		if err := do(ctx, chromedp.Navigate(h.base+"/#/services/petstore"), chromedp.WaitVisible(chromedp.CSS("#sec-save"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the config", `document.querySelector("#cfg").value.trim() === "{}"`)
		if err := do(ctx, chromedp.SetValue(chromedp.CSS("#sec"), `not json`), chromedp.Click(chromedp.CSS("#sec-save"))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, "the page scrolled to the button", `scrollY > 0`)
		wait(t, ctx, "the refusal in view", inView("[role=status]", "Secrets is not JSON"))
	})

	t.Run("no sideways scroll at phone width", func(t *testing.T) {
		pages := []struct{ hash, ready string }{
			{"#/processes", `document.querySelector("tr[data-pid]") !== null`},
			{"#/run", `/cyrnel\.output/.test(document.querySelector("details")?.textContent || "")`},
			{fmt.Sprintf("#/processes/%d", df.PID), `document.querySelector("figure.display table") !== null`},
			{"#/sessions", `document.querySelector("tr[data-session]") !== null`},
			{"#/sessions/" + ses.ID, `document.querySelector('[data-field="state"]') !== null`},
			{"#/environment", `document.querySelector("#env")?.dataset.active === "python"`},
			{"#/services", `document.querySelector("#tool-results a") !== null`},
			{"#/services/petstore", `document.querySelector("#cfg").value.trim() === "{}"`},
			{"#/tools/petstore/showPetById", `document.querySelector("#tool-docs pre") !== null`},
		}
		for _, p := range pages {
			if err := do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(h.base+"/"+p.hash)); err != nil {
				t.Fatal(err)
			}
			wait(t, ctx, p.hash, p.ready)
			if p.hash == "#/run" {
				// Open the guide and run a program with a long line of output.
				eval(t, ctx, `document.querySelector("details").open = true`)
				if err := do(ctx, chromedp.SetValue(chromedp.CSS("#code"), "print('x' * 300)\ncyrnel.output({'a_rather_long_key_name_for_a_value': 'y' * 200})"), chromedp.Click(chromedp.CSS("#run"))); err != nil {
					t.Fatal(err)
				}
				wait(t, ctx, "the run", `document.querySelector('[data-field="exit"]')?.textContent === "success"`)
			}
			wide, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
				const s = document.scrollingElement;
				if (s.scrollWidth <= s.clientWidth) return "";
				const over = [...document.querySelectorAll("main *")].filter((e) => e.getBoundingClientRect().right > s.clientWidth + 1)
					.slice(0, 3).map((e) => e.tagName + "." + e.className + "#" + e.id);
				return s.scrollWidth + " > " + s.clientWidth + " " + over.join(", ");
			})()`))
			if err != nil {
				t.Fatal(err)
			}
			if wide != "" {
				t.Errorf("%s scrolls sideways at 390 px: %s", p.hash, wide)
			}
			if p.hash == "#/run" {
				shoot(t, ctx, "views-5-run", true)
			}
		}
	})
}
