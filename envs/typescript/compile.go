package typescript

import (
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/evanw/esbuild/pkg/api"
	"github.com/go-sourcemap/sourcemap"
)

const (
	// sourceName names the user's code in stacks and syntax errors.
	sourceName = "main.ts"
	// generatedName names esbuild's output; positions that still carry it did
	// not map back to the user's code.
	generatedName = "main.js"

	// The user's code becomes the body of an async arrow so that top-level
	// await and top-level return work. The head sits on a line of its own so
	// that user line N is wrapped line N+1: syntax errors subtract one, and
	// the source map is shifted by one line (see shiftSourceLines).
	wrapperHead = "(async () => {\n"
	wrapperTail = "\n})()"
)

// transformOptions strip types and lower exactly what goja lacks: esbuild
// keeps everything else as written.
var transformOptions = api.TransformOptions{
	Loader:         api.LoaderTS,
	Target:         api.ESNext,
	Sourcefile:     sourceName,
	Sourcemap:      api.SourceMapExternal,
	SourcesContent: api.SourcesContentExclude,
	LogLevel:       api.LogLevelSilent,
	Supported: map[string]bool{
		// goja: "Async generators are not supported yet"; for await is lowered
		// together with them (esbuild's helpers use plain generators).
		"async-generator": false,
		"for-await":       false,
		// Parsed by neither goja nor older engines.
		"using":      false,
		"decorators": false,
		// goja rejects these regexp flags at parse time, failing the whole
		// program; lowered, they become new RegExp(...) and fail only if
		// reached.
		"regexp-match-indices": false,
		"regexp-set-notation":  false,
	},
}

// compiled is the cached outcome of compiling one source: a runnable program
// or the syntax error that prevents it. Programs are immutable and shared by
// concurrent executions.
type compiled struct {
	prg *goja.Program
	// userLines bounds the positions that belong to the user's code; frames
	// outside [1, userLines] are the wrapper's.
	userLines int
	syntaxErr *compileError
	cost      int
}

// compileError is a syntax error at a position in the user's TypeScript.
type compileError struct {
	Message string
	// Line and Column are 1-based; Column counts UTF-16 code units, as
	// runtime stack positions do.
	Line, Column int
	// LineText is the offending source line, when known.
	LineText string
}

func (e *compileError) Error() string {
	return fmt.Sprintf("SyntaxError: %s (%s:%d:%d)", e.Message, sourceName, e.Line, e.Column)
}

// report renders the error the way it is written to stderr: the message and
// the offending line with a caret under the column.
func (e *compileError) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: SyntaxError: %s\n", sourceName, e.Line, e.Column, e.Message)
	if e.LineText != "" {
		fmt.Fprintf(&b, "    %s\n    %s^\n", e.LineText, strings.Repeat(" ", max(e.Column-1, 0)))
	}
	return b.String()
}

// compileSource turns TypeScript into a goja program. A syntax error in the
// user's code is a result, not an error; errors are failures of the engine.
func compileSource(code string) (*compiled, error) {
	userLines := strings.Count(code, "\n") + 1
	res := api.Transform(wrapperHead+code+wrapperTail, transformOptions)
	if len(res.Errors) > 0 {
		return &compiled{syntaxErr: esbuildSyntaxError(code, userLines, res.Errors[0]), userLines: userLines, cost: len(code)}, nil
	}
	sm, err := shiftSourceMap(res.Map)
	if err != nil {
		return nil, fmt.Errorf("fixing the source map: %w", err)
	}
	js := string(res.Code) + "\n//# sourceMappingURL=" + generatedName + ".map"
	loader := parser.WithSourceMapLoader(func(string) ([]byte, error) { return sm, nil })
	ast, err := parser.ParseFile(nil, generatedName, js, 0, loader)
	if err != nil {
		var list parser.ErrorList
		if errors.As(err, &list) && len(list) > 0 {
			se, err := gojaSyntaxError(js, sm, code, list[0].Position.Line, list[0].Position.Column, list[0].Message)
			if err != nil {
				return nil, err
			}
			return &compiled{syntaxErr: se, userLines: userLines, cost: len(code)}, nil
		}
		return nil, fmt.Errorf("parsing esbuild output: %w", err)
	}
	prg, err := goja.CompileAST(ast, true)
	if err != nil {
		var cse *goja.CompilerSyntaxError
		if errors.As(err, &cse) && cse.File != nil {
			// The file carries the source map by now, so this is a user position.
			pos := cse.File.Position(cse.Offset)
			se := &compileError{Message: cse.Message, Line: pos.Line, Column: pos.Column, LineText: lineOf(code, pos.Line)}
			return &compiled{syntaxErr: se, userLines: userLines, cost: len(code)}, nil
		}
		return nil, fmt.Errorf("compiling esbuild output: %w", err)
	}
	// A compiled program holds a few times its source in instructions.
	return &compiled{prg: prg, userLines: userLines, cost: len(code) + 4*len(js) + len(sm)}, nil
}

// esbuildSyntaxError positions an esbuild error in the user's code.
func esbuildSyntaxError(code string, userLines int, msg api.Message) *compileError {
	loc := msg.Location
	if loc != nil && (loc.Line-1 < 1 || loc.Line-1 > userLines) {
		// The error surfaced in the wrapper, typically an unbalanced brace
		// that swallowed the wrapper's own. Parsed alone, the code reports
		// where it really goes wrong.
		if alone := api.Transform(code, api.TransformOptions{Loader: api.LoaderTS, Target: api.ESNext, LogLevel: api.LogLevelSilent}); len(alone.Errors) > 0 && alone.Errors[0].Location != nil {
			return positionedSyntaxError(alone.Errors[0].Text, alone.Errors[0].Location.Line, alone.Errors[0].Location)
		}
		line := min(max(loc.Line-1, 1), userLines)
		return &compileError{Message: msg.Text, Line: line, Column: 1, LineText: lineOf(code, line)}
	}
	if loc == nil {
		return &compileError{Message: msg.Text, Line: 1, Column: 1}
	}
	return positionedSyntaxError(msg.Text, loc.Line-1, loc)
}

func positionedSyntaxError(text string, line int, loc *api.Location) *compileError {
	col := min(max(loc.Column, 0), len(loc.LineText))
	before, after := loc.LineText[:col], loc.LineText[col:]
	switch {
	case strings.TrimSpace(before) == "import" || strings.HasPrefix(after, "import"):
		// esbuild stops at the token after "import" inside a function body;
		// point at the keyword and say what is wrong.
		col = strings.Index(loc.LineText, "import")
		text = importMessage
	case strings.HasPrefix(after, "export"):
		text = exportMessage
	}
	return &compileError{Message: text, Line: line, Column: utf16Len(loc.LineText[:col]) + 1, LineText: loc.LineText}
}

const (
	importMessage = `ES module "import" is not supported: a program is one self-contained script; reach services through cyrnel.services`
	exportMessage = `"export" is not supported: a program is a script, not a module; return data with cyrnel.output({...})`
)

// gojaSyntaxError positions an error goja's parser found in esbuild's output
// (dynamic import(), import.meta, syntax goja lacks). Parse errors carry
// generated positions, so they are mapped here.
func gojaSyntaxError(js string, sm []byte, code string, line, col int, message string) (*compileError, error) {
	genLine := lineOf(js, line)
	if col >= 1 && col <= len(genLine) && strings.HasPrefix(genLine[col-1:], "import") {
		message = importMessage
	}
	consumer, err := sourcemap.Parse(generatedName+".map", sm)
	if err != nil {
		return nil, fmt.Errorf("parsing the source map: %w", err)
	}
	tsLine, tsCol := 1, 1
	if _, _, l, c, ok := consumer.Source(line, col); ok && l >= 1 {
		tsLine, tsCol = l, c
	}
	return &compileError{Message: message, Line: tsLine, Column: tsCol, LineText: lineOf(code, tsLine)}, nil
}

func lineOf(s string, line int) string {
	for i := 1; i < line; i++ {
		nl := strings.IndexByte(s, '\n')
		if nl < 0 {
			return ""
		}
		s = s[nl+1:]
	}
	if nl := strings.IndexByte(s, '\n'); nl >= 0 {
		s = s[:nl]
	}
	return strings.TrimRight(s, "\r")
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r == utf8.RuneError {
			n++
			continue
		}
		n += utf16.RuneLen(r)
	}
	return n
}

// shiftSourceMap adapts esbuild's v3 source map to how goja reads it.
// goja looks positions up with 1-based generated columns and reports the
// original column as is, and go-sourcemap drops any mapping to line 1
// column 0 (the program's first statement). So every generated and
// original column moves one right, and original lines move one up, past the
// wrapper's head. Generated columns restart on each line, so each line's
// first segment is rewritten; original positions are delta-encoded across
// the whole string, so only the first segment that names a source is.
func shiftSourceMap(raw []byte) ([]byte, error) {
	var m struct {
		Version  int      `json:"version"`
		Sources  []string `json:"sources"`
		Names    []string `json:"names"`
		Mappings string   `json:"mappings"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	shifted, err := shiftMappings(m.Mappings)
	if err != nil {
		return nil, err
	}
	m.Mappings = shifted
	return json.Marshal(m)
}

func shiftMappings(mappings string) (string, error) {
	lines := strings.Split(mappings, ";")
	sourceShifted := false
	for i, line := range lines {
		if line == "" {
			continue
		}
		segs := strings.Split(line, ",")
		for j, seg := range segs {
			if j > 0 && sourceShifted {
				break
			}
			fields, err := decodeVLQ(seg)
			if err != nil {
				return "", err
			}
			if len(fields) == 0 {
				return "", errors.New("empty mapping segment")
			}
			if j == 0 {
				fields[0]++
			}
			if !sourceShifted && len(fields) >= 4 {
				fields[2]--
				fields[3]++
				sourceShifted = true
			}
			segs[j] = encodeVLQ(fields)
		}
		lines[i] = strings.Join(segs, ",")
	}
	return strings.Join(lines, ";"), nil
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func decodeVLQ(s string) ([]int, error) {
	var out []int
	value, shift := 0, 0
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(base64Digits, s[i])
		if d < 0 {
			return nil, fmt.Errorf("invalid mapping character %q", s[i])
		}
		value |= (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			continue
		}
		if value&1 != 0 {
			out = append(out, -(value >> 1))
		} else {
			out = append(out, value>>1)
		}
		value, shift = 0, 0
	}
	if shift != 0 {
		return nil, errors.New("truncated mapping segment")
	}
	return out, nil
}

func encodeVLQ(values []int) string {
	var b strings.Builder
	for _, v := range values {
		u := v << 1
		if v < 0 {
			u = (-v << 1) | 1
		}
		for {
			d := u & 31
			u >>= 5
			if u != 0 {
				d |= 32
			}
			b.WriteByte(base64Digits[d])
			if u == 0 {
				break
			}
		}
	}
	return b.String()
}

// programCache is a least-recently-used cache of compiled sources, bounded by
// an estimate of the memory they hold. Transforming costs about a
// millisecond; a hit costs a hash.
type programCache struct {
	mu     sync.Mutex
	budget int
	size   int
	order  *list.List // front is most recently used
	items  map[[sha256.Size]byte]*list.Element
}

type cacheEntry struct {
	key [sha256.Size]byte
	c   *compiled
}

func newProgramCache(budget int) *programCache {
	return &programCache{budget: budget, order: list.New(), items: map[[sha256.Size]byte]*list.Element{}}
}

func (pc *programCache) get(key [sha256.Size]byte) (*compiled, bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	el, ok := pc.items[key]
	if !ok {
		return nil, false
	}
	pc.order.MoveToFront(el)
	return el.Value.(*cacheEntry).c, true
}

func (pc *programCache) add(key [sha256.Size]byte, c *compiled) {
	if c.cost > pc.budget {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, ok := pc.items[key]; ok {
		return // a concurrent compile of the same source got here first
	}
	pc.items[key] = pc.order.PushFront(&cacheEntry{key: key, c: c})
	pc.size += c.cost
	for pc.size > pc.budget {
		oldest := pc.order.Back()
		e := oldest.Value.(*cacheEntry)
		pc.order.Remove(oldest)
		delete(pc.items, e.key)
		pc.size -= e.c.cost
	}
}
