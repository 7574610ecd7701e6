package openapi

import (
	"strings"
	"testing"
)

// TestRealDocumentsOnTheWire covers the awkward cases SOURCES.md lists for
// the real documents, on the wire where there is a request to make.
func TestRealDocumentsOnTheWire(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	a := New(Options{})
	cfg := map[string]any{"serverUrl": rec.URL}
	expect := func(t *testing.T, method, uri string, headers map[string]string, body string) {
		t.Helper()
		req := rec.last(t)
		if req.Method != method || req.RequestURI != uri {
			t.Errorf("request %s %s, want %s %s", req.Method, req.RequestURI, method, uri)
		}
		for h, want := range headers {
			if got := req.Header.Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
		if string(req.Body) != body {
			t.Errorf("body\n got %s\nwant %s", req.Body, body)
		}
	}
	baseURL := func(t *testing.T, svc, tool string, want string) {
		t.Helper()
		s := a.service(svc)
		if got, err := s.baseURL(s.tools[tool]); err != nil || got != want {
			t.Errorf("%s.%s base URL %q (%v), want %q", svc, tool, got, err, want)
		}
	}

	t.Run("petstore-expanded: exploded form array, allOf body", func(t *testing.T) {
		def := fixture(t, "petstore-expanded-3.0.yaml")
		hydrate(t, a, "pe", def, cfg, nil)
		mustCall(t, a, def, "pe", "findPets", map[string]any{"tags": []any{"cat", "dog"}, "limit": 2})
		expect(t, "GET", "/pets?tags=cat&tags=dog&limit=2", nil, "")
		mustCall(t, a, def, "pe", "find_pet_by_id", map[string]any{"id": 7})
		expect(t, "GET", "/pets/7", nil, "")
		if err := validate(t, toolByID(t, def, "addPet").InputSchema, map[string]any{"body": map[string]any{"tag": "x"}}); err == nil || !strings.Contains(err.Error(), "/body/name") {
			t.Errorf("NewPet requires name: %v", err)
		}
	})

	t.Run("swagger 2.0: host/basePath/schemes, header parameter", func(t *testing.T) {
		hydrate(t, a, "p2", fixture(t, "petstore-2.0.json"), nil, nil)
		baseURL(t, "p2", "listPets", "http://petstore.swagger.io/v1")
		def := fixture(t, "swagger-petstore-2.0.json")
		hydrate(t, a, "sp2", def, cfg, map[string]any{"api_key": "k1"})
		mustCall(t, a, def, "sp2", "deletePet", map[string]any{"petId": 3, "api_key": "from-param"})
		expect(t, "DELETE", "/pet/3", map[string]string{"api_key": "from-param"}, "")
		mustCall(t, a, def, "sp2", "getInventory", nil)
		expect(t, "GET", "/store/inventory", map[string]string{"api_key": "k1"}, "")
	})

	t.Run("3.1: $ref'd cookie parameter with description override", func(t *testing.T) {
		def := fixture(t, "path-item-servers-callbacks-3.1.yaml")
		in := decodeJSON(t, toolByID(t, def, "get_things").InputSchema)
		if d := in["properties"].(map[string]any)["biscuit"].(map[string]any)["description"]; d != "The maximum number of things to return" {
			t.Errorf("biscuit description %v", d)
		}
		hydrate(t, a, "things", def, cfg, nil)
		mustCall(t, a, def, "things", "get_things", map[string]any{"biscuit": "choc chip"})
		expect(t, "GET", "/things", map[string]string{"Cookie": "biscuit=choc%20chip"}, "")
		mustCall(t, a, def, "things", "trace_things", nil)
		expect(t, "TRACE", "/things", nil, "")
	})

	// Slack's formData operations consume form-urlencoded and JSON: JSON is
	// preferred.
	t.Run("slack: token header parameter, formData body, oauth2", func(t *testing.T) {
		def := fixture(t, "slack-web-2.0.json")
		hydrate(t, a, "slack", def, cfg, map[string]any{"slackAuth": "xoxb-1"})
		mustCall(t, a, def, "slack", "chat_postMessage", map[string]any{"token": "xoxp-2", "body": map[string]any{"channel": "C1", "text": "hi there"}})
		expect(t, "POST", "/chat.postMessage", map[string]string{
			"Token": "xoxp-2", "Authorization": "Bearer xoxb-1", "Content-Type": "application/json",
		}, `{"channel":"C1","text":"hi there"}`)
	})

	t.Run("datadog: server variables, two keys at once, bracketed names", func(t *testing.T) {
		def := fixture(t, "datadog-v1-3.0.yaml")
		hydrate(t, a, "dd", def, nil, nil)
		baseURL(t, "dd", "ListDashboards", "https://api.datadoghq.com")
		hydrate(t, a, "dd", def, map[string]any{"variables": map[string]any{"site": "datadoghq.eu"}}, nil)
		baseURL(t, "dd", "ListDashboards", "https://api.datadoghq.eu")
		hydrate(t, a, "dd", def, cfg, map[string]any{"apiKeyAuth": "api-1", "appKeyAuth": "app-2", "AuthZ": "tok"})
		mustCall(t, a, def, "dd", "ListDashboards", map[string]any{"filter_shared": true, "count": 5})
		expect(t, "GET", "/api/v1/dashboard?filter[shared]=true&count=5", map[string]string{
			"DD-API-KEY": "api-1", "DD-APPLICATION-KEY": "app-2", "Authorization": "",
		}, "")
	})

	t.Run("github: operation server variable, text body", func(t *testing.T) {
		def := fixture(t, "github-api-2020-3.0.json")
		hydrate(t, a, "gh", def, nil, nil)
		baseURL(t, "gh", "repos_upload_release_asset", "https://uploads.github.com")
		baseURL(t, "gh", "repos_list_for_org", "https://api.github.com")
		hydrate(t, a, "gh", def, cfg, nil)
		mustCall(t, a, def, "gh", "markdown_render_raw", map[string]any{"body": "# Hello *world*"})
		expect(t, "POST", "/markdown/raw", map[string]string{"Content-Type": "text/plain"}, "# Hello *world*")
		mustCall(t, a, def, "gh", "repos_list_for_org", map[string]any{"org": "octo org", "per_page": 2, "type": "public"})
		expect(t, "GET", "/orgs/octo%20org/repos?type=public&per_page=2", nil, "")
	})

	t.Run("stripe: multipart upload on its own server", func(t *testing.T) {
		hydrate(t, a, "stripe", fixture(t, "stripe-2022-04-3.0.json"), nil, nil)
		baseURL(t, "stripe", "PostFiles", "https://files.stripe.com")
		baseURL(t, "stripe", "GetCustomers", "https://api.stripe.com")
	})

	t.Run("discord: nullable JSON body, apiKey in Authorization", func(t *testing.T) {
		def := fixture(t, "discord-3.1.json")
		tool := toolByID(t, def, "create_message")
		if err := validate(t, tool.InputSchema, map[string]any{"channel_id": "1", "body": map[string]any{"content": 5.0}}); err == nil || !strings.Contains(err.Error(), "/body/content") {
			t.Errorf("content 5 accepted: %v", err)
		}
		hydrate(t, a, "discord", def, cfg, map[string]any{"BotToken": "Bot abc"})
		mustCall(t, a, def, "discord", "create_message", map[string]any{"channel_id": "123", "body": map[string]any{"content": nil, "nonce": "n1"}})
		expect(t, "POST", "/channels/123/messages", map[string]string{"Authorization": "Bot abc", "Content-Type": "application/json"}, `{"content":null,"nonce":"n1"}`)
	})
}
