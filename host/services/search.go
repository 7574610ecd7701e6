package services

import (
	"context"

	"github.com/cyrnel/cyrnel/host/store"
)

// ScoredTool is a tool a search found, with its relevance.
type ScoredTool struct {
	ToolSummary
	Score float64
}

// SearchInput is a ranked search over tools.
type SearchInput struct {
	Query     string
	ServiceID string
	Enabled   *bool
	Offset    int
	Limit     int
}

// Search ranks tools by relevance to a natural-language query over their
// ids, names, descriptions and parameter names; more says whether more
// follow.
func (m *Manager) Search(ctx context.Context, in SearchInput) (items []ScoredTool, more bool, err error) {
	rows, err := m.st.SearchTools(ctx, store.SearchFilter{Query: in.Query, ServiceID: in.ServiceID, Enabled: in.Enabled, Offset: in.Offset, Limit: in.Limit + 1})
	if err != nil {
		return nil, false, err
	}
	if more = len(rows) > in.Limit; more {
		rows = rows[:in.Limit]
	}
	items = make([]ScoredTool, 0, len(rows))
	for _, r := range rows {
		items = append(items, ScoredTool{ToolSummary: summary(r.Tool), Score: r.Score})
	}
	return items, more, nil
}

// Find is Search for callers without pages (MCP, programs): a query
// without words lists the first tools instead, unscored.
func (m *Manager) Find(ctx context.Context, query string, enabled *bool, limit int) ([]ScoredTool, error) {
	if !store.HasTerms(query) {
		items, _, err := m.Tools(ctx, ToolListInput{Enabled: enabled, Limit: limit})
		if err != nil {
			return nil, err
		}
		out := make([]ScoredTool, 0, len(items))
		for _, it := range items {
			out = append(out, ScoredTool{ToolSummary: it})
		}
		return out, nil
	}
	items, _, err := m.Search(ctx, SearchInput{Query: query, Enabled: enabled, Limit: limit})
	return items, err
}
