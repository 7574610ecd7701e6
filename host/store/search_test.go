package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestSearchRanksTheToolsOwnWordsFirst: in a small catalogue, "show one pet"
// finds showPetById first, although the synonym list (show → list) and the
// catalogue's statistics favour listPets; the control: "list the pets"
// still finds listPets first.
func TestSearchRanksTheToolsOwnWordsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			tool := func(id, desc string) Tool {
				return Tool{ServiceID: "petstore", ID: id, Name: id, Description: desc, InputSchema: json.RawMessage(`{}`),
					OutputSchema: json.RawMessage(`{}`), AdapterDomain: json.RawMessage(`{}`), Enabled: true}
			}
			empty := json.RawMessage(`{}`)
			svc := &Service{ID: "petstore", Adapter: "openapi", Name: "petstore", Source: empty, ConfigSchema: empty,
				SecretsSchema: empty, AdapterDomain: empty, Enabled: true, CreatedAt: time.Now(), UpdatedAt: time.Now()}
			if err := st.PutService(ctx, svc, []Tool{
				tool("listPets", "List all pets"), tool("createPets", "Create a pet"), tool("showPetById", "Info for a specific pet"),
			}); err != nil {
				t.Fatal(err)
			}
			for q, want := range map[string]string{"show one pet": "showPetById", "list the pets": "listPets", "make a pet": "createPets"} {
				got, err := st.SearchTools(ctx, SearchFilter{Query: q, Limit: 3})
				if err != nil || len(got) == 0 || got[0].ID != want {
					t.Errorf("%q: first %v (%v), want %s", q, ids(got), err, want)
				}
			}
		})
	}
}

func ids(ts []ScoredTool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
