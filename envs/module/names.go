package module

import "errors"

// reservedWords cannot name a service, a tool or a keyword argument: Python
// keywords, JavaScript/TypeScript reserved words (strict mode included), and
// the globals a binding must never shadow. One list for every namer, so a
// name accepted in one place works in both languages.
var reservedWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{
		"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
		"elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
		"nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
		"case", "catch", "const", "debugger", "default", "delete", "do", "enum", "export", "extends", "false",
		"function", "instanceof", "let", "new", "null", "package", "private", "protected", "public",
		"implements", "interface", "static", "super", "switch", "this", "throw", "true", "typeof", "var",
		"void", "arguments", "eval", "undefined", "NaN", "Infinity",
	} {
		m[w] = true
	}
	return m
}()

// Reserved reports whether name may not be used as an identifier in
// programs (a service, a tool, a parameter).
func Reserved(name string) bool { return reservedWords[name] }

// ConfigError is a config that validated but cannot work (a preload module
// the interpreter cannot import), or names what the operator did not
// declare at start-up (Err wraps ErrUndeclared). Field is the path inside
// the config, in the API's location syntax (preload[1]).
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ErrUndeclared: a config names something (an interpreter) the operator did
// not declare when starting the host; only the operator may add it.
var ErrUndeclared = errors.New("not declared by the operator at start-up")
