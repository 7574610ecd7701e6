package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/uptrace/bun"
)

// The tool search index: per tool its id and name split into words, its summary, its
// description and its parameter names, ranked by bm25 (SQLite FTS5) or
// ts_rank (PostgreSQL). It is written with the tools, in the same
// transaction.

// searchDoc is what a tool is found by.
type searchDoc struct {
	ident, summary, description, params string
}

func docOf(t *Tool) searchDoc {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(t.InputSchema, &schema) // a schema without properties has no parameter names
	params := make([]string, 0, len(schema.Properties))
	for name := range schema.Properties {
		params = append(params, words(name))
	}
	// The first paragraph of a description is the summary (the OpenAPI
	// adapter joins summary and description so): it says what the tool
	// does, where the rest says how.
	summary, rest, _ := strings.Cut(t.Description, "\n\n")
	ident := words(t.ID)
	if t.Name != t.ID {
		ident += " " + words(t.Name)
	}
	return searchDoc{ident: ident, summary: summary, description: rest, params: strings.Join(params, " ")}
}

// words splits identifiers into words: listMonitors → list Monitors,
// getAPIKey → get API Key, snake_case → snake case.
func words(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			b.WriteByte(' ')
			continue
		}
		if i > 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte(' ')
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

// indexTools replaces the search entries of a service's tools.
func (s *Store) indexTools(ctx context.Context, tx bun.IDB, serviceID string, tools []Tool) error {
	if _, err := tx.NewRaw("DELETE FROM tool_search WHERE service_id = ?", serviceID).Exec(ctx); err != nil {
		return fmt.Errorf("index tools: %w", err)
	}
	for i := range tools {
		d := docOf(&tools[i])
		var q string
		if s.local {
			q = "INSERT INTO tool_search (service_id, tool_id, ident, summary, description, params) VALUES (?, ?, ?, ?, ?, ?)"
		} else {
			// Weights: the id and name (A), the summary (B), parameter
			// names (C), the description (D).
			q = `INSERT INTO tool_search (service_id, tool_id, doc) VALUES (?, ?,
 setweight(to_tsvector('english', ?), 'A') || setweight(to_tsvector('english', ?), 'B') ||
 setweight(to_tsvector('english', ?), 'D') || setweight(to_tsvector('english', ?), 'C'))`
		}
		if _, err := tx.NewRaw(q, tools[i].ServiceID, tools[i].ID, d.ident, d.summary, d.description, d.params).Exec(ctx); err != nil {
			return fmt.Errorf("index tool %s.%s: %w", tools[i].ServiceID, tools[i].ID, err)
		}
	}
	return nil
}

// syncToolSearch rebuilds the index when it does not cover the tools (a
// database from before it existed).
func (s *Store) syncToolSearch(ctx context.Context) error {
	var indexed, tools int
	if err := s.DB.NewRaw("SELECT COUNT(*) FROM tool_search").Scan(ctx, &indexed); err != nil {
		return fmt.Errorf("count tool search entries: %w", err)
	}
	if err := s.DB.NewRaw("SELECT COUNT(*) FROM tools").Scan(ctx, &tools); err != nil {
		return fmt.Errorf("count tools: %w", err)
	}
	if indexed == tools {
		return nil
	}
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var all []Tool
		if err := tx.NewSelect().Model(&all).OrderExpr("service_id, id").Scan(ctx); err != nil {
			return fmt.Errorf("rebuild tool search: %w", err)
		}
		if _, err := tx.NewRaw("DELETE FROM tool_search").Exec(ctx); err != nil {
			return fmt.Errorf("rebuild tool search: %w", err)
		}
		for start := 0; start < len(all); {
			end := start
			for end < len(all) && all[end].ServiceID == all[start].ServiceID {
				end++
			}
			if err := s.indexTools(ctx, tx, all[start].ServiceID, all[start:end]); err != nil {
				return err
			}
			start = end
		}
		return nil
	})
}

// stopwords carry no meaning for finding a tool.
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "for": true, "in": true, "on": true, "by": true, "with": true,
	"and": true, "or": true, "my": true, "me": true, "i": true, "how": true, "do": true, "does": true, "what": true, "which": true,
	"is": true, "are": true, "be": true, "from": true, "that": true, "this": true, "it": true, "its": true, "can": true, "want": true,
	"some": true, "any": true, "into": true, "at": true, "as": true, "we": true, "our": true, "you": true, "your": true,
}

// synonyms map the verbs people use to the verbs API operations are named
// with, so "remove a link" finds DeleteTeamLink.
var synonyms = map[string][]string{
	"remove": {"delete"}, "erase": {"delete"}, "drop": {"delete"},
	"add": {"create"}, "new": {"create"}, "make": {"create"}, "declare": {"create"}, "register": {"create"}, "open": {"create"},
	"change": {"update"}, "edit": {"update"}, "modify": {"update"}, "set": {"update"},
	"fetch": {"get"}, "show": {"get", "list"}, "retrieve": {"get"}, "read": {"get"}, "find": {"search", "list"},
	"every": {"list"}, "all": {"list"}, "send": {"submit", "create"}, "report": {"submit", "create"}, "record": {"create"},
	"start": {"trigger", "create"}, "run": {"trigger"},
}

// terms are the words of a natural-language query, lower-cased, without
// stopwords, with the operation verbs their synonyms stand for; only
// letters and digits, so they are safe in FTS5 and tsquery syntax.
func terms(q string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(w string) {
		if !stopwords[w] && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	for _, w := range strings.Fields(strings.ToLower(words(q))) {
		add(w)
		for _, s := range synonyms[w] {
			add(s)
		}
	}
	return out
}

// stem folds a plural into its singular, so "pets" meets "Pet".
func stem(w string) string {
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		return w[:len(w)-1]
	}
	return w
}

// ownWords is the set of a query's own words (no synonyms, no stopwords),
// stemmed.
func ownWords(q string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(words(q))) {
		if !stopwords[w] {
			out[stem(w)] = true
		}
	}
	return out
}

// named counts the query's own words among the words of a tool's id and
// name.
func named(own map[string]bool, t *Tool) int {
	n := 0
	seen := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(words(t.ID + " " + t.Name))) {
		if w = stem(w); own[w] && !seen[w] {
			seen[w] = true
			n++
		}
	}
	return n
}

// rerankDepth is how many of the best-scored tools are ranked again by the
// query's own words in their names: pages within it are ordered so, the
// rest by score alone.
const rerankDepth = 50

// ScoredTool is a tool found by a search, with its relevance (higher is
// better; comparable within one query only).
type ScoredTool struct {
	Tool
	Score float64 `bun:"score"`
}

// SearchFilter is a ranked search.
type SearchFilter struct {
	Query     string
	ServiceID string
	Enabled   *bool
	Offset    int
	Limit     int
}

// SearchTools ranks tools by relevance to a natural-language query: any of
// its words may match; a tool whose id or name holds more of the query's
// own words comes first; then rarer words, and words in the id or name,
// weigh more.
func (s *Store) SearchTools(ctx context.Context, f SearchFilter) ([]ScoredTool, error) {
	ts := terms(f.Query)
	if len(ts) == 0 {
		return []ScoredTool{}, nil
	}
	var match, score, join string
	if s.local {
		quoted := make([]string, len(ts))
		for i, t := range ts {
			quoted[i] = `"` + t + `"`
		}
		match = "tool_search MATCH ?"
		// bm25 is lower for better matches; weights per column: service
		// id, tool id (unindexed), ident, summary, description, params.
		score = "-bm25(tool_search, 0, 0, 4.0, 3.0, 0.5, 1.0)"
		join = strings.Join(quoted, " OR ")
	} else {
		match = "tool_search.doc @@ to_tsquery('english', ?)"
		score = "ts_rank(tool_search.doc, to_tsquery('english', ?))"
		join = strings.Join(ts, " | ")
	}
	q := s.DB.NewSelect().TableExpr("tools AS t").
		ColumnExpr("t.service_id, t.id, t.name, t.description, t.enabled").
		Join("JOIN tool_search ON tool_search.service_id = t.service_id AND tool_search.tool_id = t.id")
	if s.local {
		q = q.ColumnExpr(score+" AS score").Where(match, join)
	} else {
		q = q.ColumnExpr(score+" AS score", join).Where(match, join)
	}
	if f.ServiceID != "" {
		q = q.Where("t.service_id = ?", f.ServiceID)
	}
	if f.Enabled != nil {
		q = q.Where("t.enabled = ?", *f.Enabled)
	}
	q = q.OrderExpr("score DESC, t.service_id, t.id")
	// A tool named with the very words asked for comes first, however the
	// catalogue's word statistics and the synonyms weigh it: the best
	// rerankDepth by score are ordered again by how many of the query's own
	// words their names hold.
	if f.Offset+f.Limit > rerankDepth {
		q = q.Limit(int64(f.Limit)).Offset(int64(f.Offset))
	} else {
		q = q.Limit(rerankDepth)
	}
	var out []ScoredTool
	if err := q.Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("search tools: %w", err)
	}
	if f.Offset+f.Limit > rerankDepth {
		return out, nil
	}
	own := ownWords(f.Query)
	type ranked struct {
		t     ScoredTool
		named int
	}
	rs := make([]ranked, len(out))
	for i := range out {
		rs[i] = ranked{out[i], named(own, &out[i].Tool)}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return b.named - a.named })
	page := make([]ScoredTool, 0, f.Limit)
	for _, r := range rs[min(f.Offset, len(rs)):min(f.Offset+f.Limit, len(rs))] {
		page = append(page, r.t)
	}
	return page, nil
}

// HasTerms reports whether a query has words a search can use.
func HasTerms(q string) bool { return len(terms(q)) > 0 }
