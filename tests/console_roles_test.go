package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// visible is a predicate: the element sel is shown (not hidden by the
// stylesheet or the hidden attribute).
func visible(sel string) string {
	return `(() => { const e = document.querySelector(` + "`" + sel + "`" + `); return !!e && e.getClientRects().length > 0; })()`
}

// useKey gives the console a key through its "API key" button and waits
// until it has learnt the key's roles.
func useKey(t *testing.T, ctx context.Context, key, roles string) {
	t.Helper()
	if err := do(ctx, chromedp.Click(chromedp.CSS("#key-button"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the key prompt", `document.querySelector("#key-dialog").open`)
	if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#key-input"), key), chromedp.Click(chromedp.CSS("#key-save"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the roles of the key", `document.querySelector("#key-button").textContent === "API key (`+roles+`)"`)
}

// TestConsoleFollowsTheKeysRoles: with a runner key the console hides what
// only an admin may do (importing and configuring services, switching the
// environment, a service's page) and the approvals; with an approver key it
// shows the approvals and hides running code; a refused call says that the
// key may not do it. The bootstrap key is the control: the same elements
// show for it.
func TestConsoleFollowsTheKeysRoles(t *testing.T) {
	h := start(t, "")
	runner := h.newKey("agent", "runner")
	approver := h.newKey("reviewer", "approver")
	ctx, reqs := browser(t)
	if err := do(ctx, chromedp.Navigate(h.base+"/#/services")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the key prompt", `document.querySelector("#key-dialog").open`)
	if err := do(ctx, chromedp.SendKeys(chromedp.CSS("#key-input"), runner.Key), chromedp.Click(chromedp.CSS("#key-save"))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the runner's roles", `document.querySelector("#key-button").textContent === "API key (runner)"`)
	wait(t, ctx, "the tool search", visible("#tool-q"))
	wait(t, ctx, "the admin note", visible("#admin-note"))
	for _, sel := range []string{"#svc-import", "table[aria-label=Services]", "#nav-approvals"} {
		wait(t, ctx, sel+" hidden", "!"+visible(sel))
	}
	wait(t, ctx, "Run in the menu", visible(`nav a[data-page="run"]`))
	shoot(t, ctx, "roles-runner-services", true)

	if err := do(ctx, chromedp.Navigate(h.base+"/#/environment")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the environment", `document.querySelector("#env")?.dataset.active === "python"`)
	wait(t, ctx, "no switch", "!"+visible("#env-switch"))
	wait(t, ctx, "no error shown", `document.querySelector("#notice").className !== "error"`)
	if err := do(ctx, chromedp.Navigate(h.base+"/#/services/petstore")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the admin-only page", visible("#needs-admin"))
	// A call the key may not make says so.
	eval(t, ctx, `guard(() => api.get("/modules"))`)
	wait(t, ctx, "the 403 message", `/^Not allowed with this key: .*needs the role admin/.test(document.querySelector("#notice").textContent)`)
	shoot(t, ctx, "roles-runner-refused", true)

	useKey(t, ctx, approver.Key, "approver")
	if err := do(ctx, chromedp.Navigate(h.base+"/#/processes")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "approvals in the menu", visible("#nav-approvals"))
	wait(t, ctx, "no Run in the menu", "!"+visible(`nav a[data-page="run"]`))
	shoot(t, ctx, "roles-approver", false)

	// The control: the bootstrap key sees what the others did not.
	useKey(t, ctx, h.key, "admin, approver, runner")
	if err := do(ctx, chromedp.Navigate(h.base+"/#/services")); err != nil {
		t.Fatal(err)
	}
	for _, sel := range []string{"#svc-import", "table[aria-label=Services]", "#nav-approvals", `nav a[data-page="run"]`} {
		wait(t, ctx, sel+" shown to admin", visible(sel))
	}
	wait(t, ctx, "no admin note for admin", "!"+visible("#admin-note"))
	for _, u := range reqs.all() {
		for _, k := range []string{runner.Key, approver.Key, h.key} {
			if strings.Contains(u, k) {
				t.Fatalf("a key in a URL: %s", u)
			}
		}
	}
}
