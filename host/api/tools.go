package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/services"
)

type listToolsInput struct {
	ServiceID string `query:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Only this service's tools."`
	Enabled   string `query:"enabled" enum:"true,false" doc:"Only enabled (true) or disabled (false) tools."`
	Q         string `query:"q" maxLength:"200" pattern:"^[^\\x00]*$" doc:"Case-insensitive text to find in the id, name or description."`
	Limit     int    `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor    string `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type toolList struct {
	Body struct {
		Items      []services.ToolSummary `json:"items" nullable:"false"`
		NextCursor *string                `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool                   `json:"hasMore"`
	}
}

type toolPath struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Tool id."`
}

type toolBody struct {
	Body *services.Tool
}

type patchToolInput struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Tool id."`
	Body      enabledBody
}

type invokeInput struct {
	ServiceID string `path:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Service id."`
	ToolID    string `path:"toolId" maxLength:"1024" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Tool id."`
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
	}, func(ctx context.Context, in *listToolsInput) (*toolList, error) {
		after, ok := decodeToolCursor(in.Cursor)
		if !ok {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.cursor", Message: "not a cursor from this API", Value: in.Cursor})
		}
		var enabled *bool
		if in.Enabled != "" {
			v := in.Enabled == "true"
			enabled = &v
		}
		items, more, err := s.Services.Tools(ctx, services.ToolListInput{ServiceID: in.ServiceID, Enabled: enabled, Query: in.Q, After: after, Limit: in.Limit})
		if err != nil {
			return nil, s.problem(err)
		}
		out := &toolList{}
		out.Body.Items, out.Body.HasMore = items, more
		if more {
			last := items[len(items)-1]
			c := base64.RawURLEncoding.EncodeToString([]byte(last.ServiceID + "\x00" + last.ID))
			out.Body.NextCursor = &c
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getTool", Method: http.MethodGet, Path: "/tools/{serviceId}/{toolId}", Tags: tags,
		Summary: "Get a tool with its input and output schemas",
	}, func(ctx context.Context, in *toolPath) (*toolBody, error) {
		t, err := s.Services.Tool(ctx, in.ServiceID, in.ToolID)
		if err != nil {
			return nil, s.problem(err)
		}
		return &toolBody{t}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "updateTool", Method: http.MethodPatch, Path: "/tools/{serviceId}/{toolId}", Tags: tags,
		Summary: "Enable or disable a tool",
	}, func(ctx context.Context, in *patchToolInput) (*toolBody, error) {
		t, err := s.Services.SetToolEnabled(ctx, in.ServiceID, in.ToolID, in.Body.Enabled)
		if err != nil {
			return nil, s.problem(err)
		}
		return &toolBody{t}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getToolDocs", Method: http.MethodGet, Path: "/tools/{serviceId}/{toolId}/docs", Tags: tags,
		Summary: "How to call a tool from the active environment", Responses: markdownResponses("Markdown: the tool as the active environment calls it."),
	}, func(ctx context.Context, in *toolPath) (*markdownBody, error) {
		t, err := s.Services.Tool(ctx, in.ServiceID, in.ToolID)
		if err != nil {
			return nil, s.problem(err)
		}
		env, err := s.Modules.Active()
		if err != nil {
			return nil, s.problem(err)
		}
		doc, err := env.ToolDocs(ctx, module.ToolDocsInput{
			ServiceID: t.ServiceID, ToolID: t.ID, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		})
		if err != nil {
			return nil, s.problem(err)
		}
		return &markdownBody{ContentType: "text/markdown; charset=utf-8", Body: []byte(doc)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "invokeTool", Method: http.MethodPost, Path: "/tools/{serviceId}/{toolId}/invoke", Tags: tags,
		Summary: "Call a tool", Errors: []int{http.StatusConflict, http.StatusBadGateway},
		Description: "The same validation and adapter path as calls from code. A disabled tool or service is a 409; a failed call (transport, timeout) a 502. " +
			"For OpenAPI tools a non-2xx answer of the upstream API is a result, not an error.",
	}, func(ctx context.Context, in *invokeInput) (*invokeBody, error) {
		res, err := s.Services.Invoke(ctx, module.InvokeInput{ServiceID: in.ServiceID, ToolID: in.ToolID, Parameters: in.Body.Parameters})
		if err != nil {
			return nil, s.problem(err)
		}
		out := &invokeBody{}
		out.Body.Result = res
		return out, nil
	})
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
