package audit

import "strings"

// Redacted replaces the value of a secret-bearing field.
const Redacted = "[redacted]"

// secretWords mark a field as secret-bearing when its name, lower-cased
// with '-' and '_' removed, contains one of them. Security-scheme inputs
// never reach a tool's parameters (the adapter applies them from the
// service's sealed secrets and drops Authorization header parameters), so
// what remains is parameters and body fields named like credentials.
var secretWords = []string{"authorization", "apikey", "accesskey", "token", "secret", "password", "passwd", "pwd", "cookie", "credential", "privatekey", "session", "bearer", "signature", "auth"}

var separators = strings.NewReplacer("-", "", "_", "")

// Secret reports whether a field name is secret-bearing.
func Secret(name string) bool {
	n := strings.ToLower(separators.Replace(name))
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Redact returns a copy of params with the values of secret-bearing fields,
// at any depth, replaced by Redacted. params itself is not changed.
func Redact(params map[string]any) map[string]any {
	out, _ := redact(params).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

func redact(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if Secret(k) {
				out[k] = Redacted
			} else {
				out[k] = redact(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = redact(x)
		}
		return out
	}
	return v
}
