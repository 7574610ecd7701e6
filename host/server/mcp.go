package server

import (
	"context"
	"fmt"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/mcp"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/services"
)

// mcpTools adapts the tool service and the active environment to what the
// MCP endpoint consumes.
type mcpTools struct {
	services *services.Manager
	modules  *modules.Registry
}

func (t mcpTools) SearchTools(ctx context.Context, query string, limit int) ([]mcp.Tool, error) {
	enabled := true
	items, err := t.services.Find(ctx, query, &enabled, limit)
	if err != nil {
		return nil, fmt.Errorf("search tools: %w", err)
	}
	out := make([]mcp.Tool, 0, len(items))
	for _, it := range items {
		out = append(out, mcp.Tool{ServiceID: it.ServiceID, ToolID: it.ID, Name: it.Name, Description: it.Description, Score: it.Score})
	}
	return out, nil
}

func (t mcpTools) ToolDocs(ctx context.Context, serviceID, toolID string) (string, error) {
	tool, err := t.services.Tool(ctx, serviceID, toolID)
	if err != nil {
		return "", err
	}
	env, err := t.modules.Active()
	if err != nil {
		return "", err
	}
	docs, err := env.ToolDocs(ctx, module.ToolDocsInput{
		ServiceID: tool.ServiceID, ToolID: tool.ID, Description: tool.Description, InputSchema: tool.InputSchema, OutputSchema: tool.OutputSchema,
	})
	if err != nil {
		return "", fmt.Errorf("docs of tool %s.%s: %w", serviceID, toolID, err)
	}
	return docs, nil
}
