package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/store"
)

type listToolsInput struct {
	ServiceID string        `query:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Only this service's tools."`
	Enabled   enabledFilter `query:"enabled" doc:"Only enabled (true) or disabled (false) tools."`
	Q         string        `query:"q" maxLength:"200" pattern:"^[^\\x00]*$" doc:"What to find, in words: tools are ranked by relevance over their ids, names, summaries, descriptions and parameter names, best first, each with its score."`
	Limit     int           `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor    string        `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

// toolItem is a tool in a listing with its effective policy.
type toolItem struct {
	ToolSummary
	Policy decision `json:"policy" doc:"What the tool policies decide for calls of this tool."`
	Score  *float64 `json:"score,omitempty" doc:"With q: the relevance to the query (higher is better, comparable within one query)."`
}

type toolList struct {
	Body struct {
		Items      []toolItem `json:"items" nullable:"false"`
		NextCursor *string    `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool       `json:"hasMore"`
	}
}

type toolPath struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"petstore" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"getPetById" doc:"Tool id."`
}

// toolDetail is a tool with its schemas and effective policy.
type toolDetail struct {
	*Tool
	Policy decision `json:"policy" doc:"What the tool policies decide for calls of this tool."`
}

type toolBody struct {
	Body toolDetail
}

func (s *server) toolBody(t *services.Tool) *toolBody {
	return &toolBody{toolDetail{toolOf(t), decision(s.Policies.Decide(t.ServiceID, t.ID))}}
}

type patchToolInput struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"petstore" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"getPetById" doc:"Tool id."`
	Body      enabledBody
}

type invokeInput struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"petstore" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"getPetById" doc:"Tool id."`
	Body      struct {
		Parameters map[string]any `json:"parameters,omitempty" doc:"The tool's parameters: the top-level properties of its input schema."`
	}
}

type invokeBody struct {
	Body struct {
		Result any `json:"result" doc:"What the tool returned (for OpenAPI tools: {status, headers, body})."`
	}
}

func (s *server) registerTools(api huma.API) {
	tags := []string{"tools"}
	huma.Register(api, huma.Operation{
		OperationID: "listTools", Method: http.MethodGet, Path: "/tools", Tags: tags, Summary: "List and search tools",
	}, s.listTools)

	huma.Register(api, huma.Operation{
		OperationID: "getTool", Method: http.MethodGet, Path: "/tools/{serviceId}/{toolId}", Tags: tags,
		Summary: "Get a tool with its input and output schemas",
	}, func(ctx context.Context, in *toolPath) (*toolBody, error) {
		t, err := s.Tools.Tool(ctx, in.ServiceID, in.ToolID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return s.toolBody(t), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "updateTool", Method: http.MethodPatch, Path: "/tools/{serviceId}/{toolId}", Tags: tags,
		Summary: "Enable or disable a tool",
	}, func(ctx context.Context, in *patchToolInput) (*toolBody, error) {
		t, err := s.Tools.SetToolEnabled(ctx, in.ServiceID, in.ToolID, in.Body.Enabled)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return s.toolBody(t), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getToolDocs", Method: http.MethodGet, Path: "/tools/{serviceId}/{toolId}/docs", Tags: tags,
		Summary: "How to call a tool from the active environment", Responses: markdownResponses("Markdown: the tool as the active environment calls it."),
	}, func(ctx context.Context, in *toolPath) (*markdownBody, error) {
		t, err := s.Tools.Tool(ctx, in.ServiceID, in.ToolID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		env, err := s.Environment.Active()
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		doc, err := env.ToolDocs(ctx, module.ToolDocsInput{
			ServiceID: t.ServiceID, ToolID: t.ID, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &markdownBody{ContentType: "text/markdown; charset=utf-8", Body: []byte(doc)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "invokeTool", Method: http.MethodPost, Path: "/tools/{serviceId}/{toolId}/invoke", Tags: tags,
		Summary: "Call a tool", Errors: []int{http.StatusForbidden, http.StatusConflict, http.StatusBadGateway},
		Description: "The same policy, validation, audit and adapter path as calls from code. A tool the policies block is a 403, and so is one " +
			"they ask an approval for (only calls from code wait for one). A disabled tool or service is a 409; a failed call (transport, timeout) a 502. " +
			"For OpenAPI tools a non-2xx answer of the upstream API is a result, not an error.",
	}, func(ctx context.Context, in *invokeInput) (*invokeBody, error) {
		res, err := s.Gate.Invoke(ctx, gate.FromAPI, module.InvokeInput{ServiceID: in.ServiceID, ToolID: in.ToolID, Parameters: in.Body.Parameters})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &invokeBody{}
		out.Body.Result = res
		return out, nil
	})
}

// listTools pages through the tools, or searches them when the query has terms.
func (s *server) listTools(ctx context.Context, in *listToolsInput) (*toolList, error) {
	enabled := in.Enabled.wanted()
	if store.HasTerms(in.Q) {
		return s.searchTools(ctx, in, enabled)
	}
	after, ok := decodeToolCursor(in.Cursor)
	if !ok {
		return nil, badCursor(in.Cursor)
	}
	items, more, err := s.Tools.Tools(ctx, services.ToolListInput{ServiceID: in.ServiceID, Enabled: enabled, After: after, Limit: in.Limit})
	if err != nil {
		return nil, s.problem(ctx, err)
	}
	out := &toolList{}
	out.Body.HasMore = more
	out.Body.Items = make([]toolItem, 0, len(items))
	for _, it := range items {
		out.Body.Items = append(out.Body.Items, toolItem{ToolSummary: toolSummaryOf(it), Policy: decision(s.Policies.Decide(it.ServiceID, it.ID))})
	}
	if more {
		last := items[len(items)-1]
		c := base64.RawURLEncoding.EncodeToString([]byte(last.ServiceID + "\x00" + last.ID))
		out.Body.NextCursor = &c
	}
	return out, nil
}

func decodeToolCursor(c string) ([2]string, bool) {
	if c == "" {
		return [2]string{}, true
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return [2]string{}, false
	}
	svc, tool, ok := strings.Cut(string(b), "\x00")
	if !ok || svc == "" {
		return [2]string{}, false
	}
	return [2]string{svc, tool}, true
}

// searchTools answers a listing with a query: ranked, paged by position.
func (s *server) searchTools(ctx context.Context, in *listToolsInput, enabled *bool) (*toolList, error) {
	offset := 0
	if in.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(in.Cursor)
		n, ok := strings.CutPrefix(string(b), "#")
		if err != nil || !ok {
			return nil, badCursor(in.Cursor)
		}
		if offset, err = strconv.Atoi(n); err != nil || offset < 0 || offset > 100000 {
			return nil, badCursor(in.Cursor)
		}
	}
	items, more, err := s.Tools.Search(ctx, services.SearchInput{Query: in.Q, ServiceID: in.ServiceID, Enabled: enabled, Offset: offset, Limit: in.Limit})
	if err != nil {
		return nil, s.problem(ctx, err)
	}
	out := &toolList{}
	out.Body.HasMore = more
	out.Body.Items = make([]toolItem, 0, len(items))
	for _, it := range items {
		score := it.Score
		out.Body.Items = append(out.Body.Items, toolItem{ToolSummary: toolSummaryOf(it.ToolSummary), Policy: decision(s.Policies.Decide(it.ServiceID, it.ID)), Score: &score})
	}
	if more {
		c := base64.RawURLEncoding.EncodeToString([]byte("#" + strconv.Itoa(offset+len(items))))
		out.Body.NextCursor = &c
	}
	return out, nil
}
