package store

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
)

// Object and Displays are JSON stored as text (a process's output,
// environment config and rich displays). They encode themselves rather than
// through bun's JSON appender, which rewrites the escape of a NUL inside a
// string (\u0000) to the six characters \u0000 for PostgreSQL's jsonb: what
// a program wrote reads back as it wrote it. A nil Object is stored as
// "null", as bun stores a nil map.
type Object map[string]any

// Displays are an execution's rich displays.
type Displays []Display

// Value encodes o as JSON text.
func (o Object) Value() (driver.Value, error) { return jsonValue(map[string]any(o)) }

// Scan decodes JSON text; NULL and "null" are the nil object.
func (o *Object) Scan(src any) error { return scanJSON(src, (*map[string]any)(o)) }

// Value encodes d as JSON text.
func (d Displays) Value() (driver.Value, error) { return jsonValue([]Display(d)) }

// Scan decodes JSON text; NULL is none.
func (d *Displays) Scan(src any) error { return scanJSON(src, (*[]Display)(d)) }

func jsonValue(v any) (driver.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return string(b), nil
}

// scanJSON decodes a JSON text column into dst (NULL: dst's zero value).
func scanJSON[T any](src any, dst *T) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		var zero T
		*dst = zero
		return nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("JSON from %T", src)
	}
	var x T
	if err := json.Unmarshal(b, &x); err != nil {
		return fmt.Errorf("decode JSON: %w", err)
	}
	*dst = x
	return nil
}
