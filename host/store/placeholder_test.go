package store

import (
	"context"
	"testing"
)

// TestQuestionMarksThroughBun: the store's SQL reaches the database through
// bun, which binds each ? to the next argument wherever it stands (string
// literals, quoted identifiers and comments included: it does not parse SQL;
// ?name is a named argument), so a ? meant as itself is written \?. Checked
// on a literal, a quoted identifier, a comment and PostgreSQL's jsonb ?, ?|
// and ?& operators, with a control showing what an unescaped ? in a literal
// becomes.
func TestQuestionMarksThroughBun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			var got string
			q := `SELECT '\?a' || ? /* \? */ AS "q\?"`
			if err := st.DB.QueryRowContext(ctx, q, "b").Scan(&got); err != nil || got != "?ab" {
				t.Errorf("%s: %q %v, want \"?ab\"", q, got, err)
			}
			// Without arguments bun leaves the text alone.
			if err := st.DB.QueryRowContext(ctx, `SELECT 'a?b' AS "c?d"`).Scan(&got); err != nil || got != "a?b" {
				t.Errorf("no arguments: %q %v", got, err)
			}
			// Control: unescaped, the literal's ? takes the argument (?b
			// would be a named one).
			if err := st.DB.QueryRowContext(ctx, `SELECT 'a? b' || ?`, "x").Scan(&got); err == nil && got == "a? bx" {
				t.Errorf("unescaped: %q %v: bun no longer binds a ? inside a literal; this test and the rule it checks need a look", got, err)
			}
			if name != "postgres" {
				return
			}
			var has, any, all bool
			q = `SELECT '{"a":1,"b":2}'::jsonb \? ?, '{"a":1}'::jsonb \?| array[?, ?], '{"a":1,"b":2}'::jsonb \?& array[?, ?]`
			if err := st.DB.QueryRowContext(ctx, q, "a", "z", "a", "a", "b").Scan(&has, &any, &all); err != nil || !has || !any || !all {
				t.Errorf("%s: %v %v %v %v", q, has, any, all, err)
			}
		})
	}
}
