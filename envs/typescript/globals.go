package typescript

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/dop251/goja"

	"github.com/cyrnel/cyrnel/envs/module"
)

// install gives a fresh runtime its globals: cyrnel, console, setTimeout and
// clearTimeout. goja exposes nothing of the host by itself (no require, no
// file system), and nothing else is added.
func (r *run) install() error {
	vm := r.vm
	vm.SetMaxCallStackSize(r.opts.MaxCallStackSize)
	vm.SetPromiseRejectionTracker(r.trackRejection)

	jsonObj, ok := vm.Get("JSON").(*goja.Object)
	if !ok {
		return errors.New("no JSON object")
	}
	r.stringify, _ = goja.AssertFunction(jsonObj.Get("stringify"))
	r.parse, _ = goja.AssertFunction(jsonObj.Get("parse"))
	objectCtor, ok := vm.Get("Object").(*goja.Object)
	if !ok {
		return errors.New("no Object constructor")
	}
	r.objectProto, _ = objectCtor.Get("prototype").(*goja.Object)
	r.errorCtor = vm.Get("Error")
	if r.stringify == nil || r.parse == nil || r.objectProto == nil {
		return errors.New("incomplete JavaScript built-ins")
	}

	cyrnel := vm.NewObject()
	if err := cyrnel.Set("output", r.function("output", r.output)); err != nil {
		return err
	}
	// services is built on first use: ListTools is a host call that programs
	// without tools never pay for.
	if err := cyrnel.DefineAccessorProperty("services", r.function("services", r.services), nil, goja.FLAG_FALSE, goja.FLAG_TRUE); err != nil {
		return err
	}

	// The callbacks are read when console prints: a runtime is built
	// before the execution that gives them (Engine.Prepare).
	stdout := func(p []byte) { r.cb.Stdout(p) }
	stderr := func(p []byte) { r.cb.Stderr(p) }
	console := vm.NewObject()
	for name, emit := range map[string]func([]byte){
		"log": stdout, "info": stdout, "debug": stdout,
		"warn": stderr, "error": stderr,
	} {
		if err := console.Set(name, r.function(name, r.printer(emit))); err != nil {
			return err
		}
	}

	for name, v := range map[string]any{
		"cyrnel": cyrnel, "console": console,
		"setTimeout":   r.function("setTimeout", r.setTimeout),
		"clearTimeout": r.function("clearTimeout", r.clearTimeout),
	} {
		if err := vm.Set(name, v); err != nil {
			return err
		}
	}
	return nil
}

// function makes a native function named as scripts see it: goja would name
// it after the Go function, and that name shows in stack traces.
func (r *run) function(name string, f func(goja.FunctionCall) goja.Value) *goja.Object {
	fn := r.vm.ToValue(f).(*goja.Object)
	r.must(fn.DefineDataProperty("name", r.vm.ToValue(name), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE))
	return fn
}

// output is cyrnel.output(patch): the patch goes to the host, which merges
// it into the process output.
func (r *run) output(call goja.FunctionCall) goja.Value {
	v := call.Argument(0)
	if !isPlainObject(v) {
		panic(r.vm.NewTypeError("cyrnel.output expects an object, got %s", typeName(v)))
	}
	s := r.strictJSON(v, "cyrnel.output")
	if !strings.HasPrefix(s, "{") {
		panic(r.vm.NewTypeError("cyrnel.output: the value must serialise to a JSON object, got %s", s))
	}
	var patch map[string]any
	if err := json.Unmarshal([]byte(s), &patch); err != nil {
		panic(r.vm.NewTypeError("cyrnel.output: %s", err.Error()))
	}
	r.cb.Output(patch)
	return goja.Undefined()
}

// strictJSON is JSON.stringify that refuses what JSON would silently drop:
// functions and symbols. BigInt and cycles already throw a TypeError.
func (r *run) strictJSON(v goja.Value, what string) string {
	replacer := r.function("replacer", func(call goja.FunctionCall) goja.Value {
		val := call.Argument(1)
		if _, isFn := goja.AssertFunction(val); isFn {
			panic(r.vm.NewTypeError("%s: property %q is a function, which is not JSON-serialisable", what, call.Argument(0).String()))
		}
		if _, isSym := val.(*goja.Symbol); isSym {
			panic(r.vm.NewTypeError("%s: property %q is a symbol, which is not JSON-serialisable", what, call.Argument(0).String()))
		}
		return val
	})
	s, err := r.stringify(goja.Undefined(), v, replacer)
	if err != nil {
		panic(err)
	}
	return s.String()
}

func isPlainObject(v goja.Value) bool {
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() == "Array" {
		return false
	}
	_, isFn := goja.AssertFunction(obj)
	return !isFn
}

func typeName(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	if obj, ok := v.(*goja.Object); ok {
		if _, isFn := goja.AssertFunction(obj); isFn {
			return "a function"
		}
		if obj.ClassName() == "Array" {
			return "an array"
		}
		return "an object"
	}
	if _, isSym := v.(*goja.Symbol); isSym {
		return "a symbol"
	}
	if v.ExportType() == bigIntType {
		return "a bigint"
	}
	switch v.ExportType().Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int64, reflect.Float64:
		return "a number"
	}
	return "a " + v.ExportType().Kind().String()
}

// printer is console.log and friends: arguments are printed as Node prints
// them at a glance (strings raw, objects as JSON, errors with their stack),
// separated by spaces, one line per call.
func (r *run) printer(emit func([]byte)) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		var b strings.Builder
		for i, a := range call.Arguments {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(r.inspect(a))
		}
		b.WriteByte('\n')
		emit([]byte(b.String()))
		return goja.Undefined()
	}
}

var bigIntType = reflect.TypeOf((*big.Int)(nil))

func (r *run) inspect(v goja.Value) string {
	obj, ok := v.(*goja.Object)
	if !ok {
		if sym, isSym := v.(*goja.Symbol); isSym {
			return symbolLabel(sym)
		}
		if v != nil && v.ExportType() == bigIntType {
			return v.String() + "n"
		}
		if v == nil {
			return "undefined"
		}
		return v.String()
	}
	if _, isFn := goja.AssertFunction(obj); isFn {
		return functionLabel(obj)
	}
	if obj.ClassName() == "Error" {
		header, frames := r.describe(obj)
		return strings.TrimRight(header+"\n"+frames, "\n")
	}
	s, err := r.stringify(goja.Undefined(), obj)
	if err != nil {
		// Cycles and BigInts: print what can be printed.
		if s, err = r.stringify(goja.Undefined(), obj, r.lenientReplacer()); err != nil {
			panic(err)
		}
	}
	if goja.IsUndefined(s) {
		return "undefined"
	}
	return s.String()
}

func functionLabel(fn *goja.Object) string {
	if name := fn.Get("name"); name != nil && name.String() != "" {
		return "[Function: " + name.String() + "]"
	}
	return "[Function (anonymous)]"
}

func symbolLabel(s *goja.Symbol) string {
	return "Symbol(" + s.String() + ")"
}

// lenientReplacer marks repeated objects as [Circular] (shared references
// too: a replacer cannot see its ancestors) and prints BigInts, functions
// and symbols as labels.
func (r *run) lenientReplacer() goja.Value {
	seen := map[*goja.Object]bool{}
	return r.function("replacer", func(call goja.FunctionCall) goja.Value {
		val := call.Argument(1)
		switch v := val.(type) {
		case *goja.Object:
			if _, isFn := goja.AssertFunction(v); isFn {
				return r.vm.ToValue(functionLabel(v))
			}
			if seen[v] {
				return r.vm.ToValue("[Circular]")
			}
			seen[v] = true
		case *goja.Symbol:
			return r.vm.ToValue(symbolLabel(v))
		default:
			if val.ExportType() == bigIntType {
				return r.vm.ToValue(val.String() + "n")
			}
		}
		return val
	})
}

// describe renders a thrown value: a header ("Name: message", as the error
// of a failed run) and its stack frames in the user's code.
func (r *run) describe(v goja.Value) (header, frames string) {
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() != "Error" {
		if s, isStr := v.(goja.String); isStr {
			return "Uncaught " + strconv.Quote(s.String()), ""
		}
		return "Uncaught " + r.inspect(v), ""
	}
	name, message := "Error", ""
	if n := obj.Get("name"); n != nil && !goja.IsUndefined(n) {
		name = n.String()
	}
	if m := obj.Get("message"); m != nil && !goja.IsUndefined(m) {
		message = m.String()
	}
	header = name
	if message != "" {
		header += ": " + message
	}
	if stack := obj.Get("stack"); stack != nil {
		frames = formatFrames(r.stackFrames(stack.String()))
	}
	return header, frames
}

// frame is a stack frame in the user's code (or a named built-in).
type frame struct {
	name      string
	line, col int
	native    bool
}

const maxFrames = 20

func formatFrames(frames []frame) string {
	var b strings.Builder
	for i, f := range frames {
		if i == maxFrames {
			fmt.Fprintf(&b, "    ... %d more\n", len(frames)-maxFrames)
			break
		}
		switch {
		case f.native:
			fmt.Fprintf(&b, "    at %s (native)\n", f.name)
		case f.name != "":
			fmt.Fprintf(&b, "    at %s (%s:%d:%d)\n", f.name, sourceName, f.line, f.col)
		default:
			fmt.Fprintf(&b, "    at %s:%d:%d\n", sourceName, f.line, f.col)
		}
	}
	return b.String()
}

func (r *run) userPosition(file string, line int) bool {
	return file == sourceName && line >= 1 && line <= r.prog.userLines
}

func (r *run) gojaFrames(stack []goja.StackFrame) []frame {
	var out []frame
	for i := range stack {
		f := &stack[i]
		pos := f.Position()
		name := f.FuncName()
		if name == "<anonymous>" {
			name = ""
		}
		switch {
		case f.SrcName() == "<native>" && name != "<native>":
			out = append(out, frame{name: name, native: true})
		case r.userPosition(pos.Filename, pos.Line):
			out = append(out, frame{name: name, line: pos.Line, col: pos.Column})
		}
	}
	return out
}

// gojaStackLine matches a frame of goja's Error.prototype.stack:
// "name (file:line:col(pc))" or "file:line:col(pc)".
var gojaStackLine = regexp.MustCompile(`^(?:(.+) \()?([^()]*):(\d+):(\d+)\(\d+\)\)?$`)

// stackFrames parses the frames of an Error's stack property, keeping those
// in the user's code: the wrapper's frames and goja's program counters go.
func (r *run) stackFrames(stack string) []frame {
	var out []frame
	for _, line := range strings.Split(stack, "\n") {
		line, ok := strings.CutPrefix(line, "\tat ")
		if !ok {
			continue
		}
		if name, isNative := strings.CutSuffix(line, " (native)"); isNative {
			out = append(out, frame{name: name, native: true})
			continue
		}
		m := gojaStackLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		l, _ := strconv.Atoi(m[3])
		c, _ := strconv.Atoi(m[4])
		if r.userPosition(m[2], l) {
			out = append(out, frame{name: m[1], line: l, col: c})
		}
	}
	return out
}

// newError creates an Error with the given name; it captures the current
// JavaScript stack.
func (r *run) newError(name, message string) *goja.Object {
	obj, err := r.vm.New(r.errorCtor, r.vm.ToValue(message))
	if err != nil {
		panic(err)
	}
	if name != "Error" {
		if err := obj.Set("name", name); err != nil {
			panic(err)
		}
	}
	return obj
}

// toolIndex is the host's tool list for one run, fetched on first use.
type toolIndex struct {
	services map[string]*serviceEntry
	names    []string
}

type serviceEntry struct {
	id       string
	tools    map[string]module.Tool
	names    []string
	obj      *goja.Object
	toolObjs map[string]*goja.Object
}

func (r *run) index() *toolIndex {
	if r.tools != nil {
		return r.tools
	}
	list, err := r.cb.ListTools(r.ctx)
	if err != nil {
		panic(r.newError("Error", "cyrnel.services: listing the tools failed: "+err.Error()))
	}
	idx := &toolIndex{services: map[string]*serviceEntry{}}
	for _, t := range list {
		s, ok := idx.services[t.ServiceID]
		if !ok {
			s = &serviceEntry{id: t.ServiceID, tools: map[string]module.Tool{}, toolObjs: map[string]*goja.Object{}}
			idx.services[t.ServiceID] = s
			idx.names = append(idx.names, t.ServiceID)
		}
		if _, dup := s.tools[t.ToolID]; !dup {
			s.names = append(s.names, t.ToolID)
		}
		s.tools[t.ToolID] = t
	}
	sort.Strings(idx.names)
	for _, s := range idx.services {
		sort.Strings(s.names)
	}
	r.tools = idx
	return idx
}

// services is the getter of cyrnel.services.
func (r *run) services(goja.FunctionCall) goja.Value {
	if r.servicesObj == nil {
		r.servicesObj = r.vm.NewDynamicObject(servicesObject{r})
	}
	return r.servicesObj
}

// inherited reports keys that must resolve through the prototype chain
// rather than to a placeholder: Object.prototype's members, and the probes
// await and JSON.stringify make (then, toJSON).
func (r *run) inherited(key string) bool {
	return key == "then" || key == "toJSON" || r.objectProto.Get(key) != nil
}

// servicesObject is cyrnel.services: one entry per service of the host's
// tool list. An unknown name yields a placeholder whose tools' invoke
// rejects with a message naming what is available, rather than a TypeError
// about undefined.
type servicesObject struct{ r *run }

func (s servicesObject) Get(key string) goja.Value {
	r := s.r
	idx := r.index()
	if svc, ok := idx.services[key]; ok {
		return r.serviceObject(svc)
	}
	if r.inherited(key) {
		return nil
	}
	return r.placeholderService(fmt.Sprintf("unknown service %q; %s", key, available("services", idx.names)))
}
func (s servicesObject) Has(key string) bool       { _, ok := s.r.index().services[key]; return ok }
func (s servicesObject) Keys() []string            { return append([]string(nil), s.r.index().names...) }
func (servicesObject) Set(string, goja.Value) bool { return false }
func (servicesObject) Delete(string) bool          { return false }

func (r *run) serviceObject(svc *serviceEntry) *goja.Object {
	if svc.obj == nil {
		svc.obj = r.vm.NewObject()
		r.must(svc.obj.Set("id", svc.id))
		r.must(svc.obj.Set("tools", r.vm.NewDynamicObject(toolsObject{r, svc})))
	}
	return svc.obj
}

// toolsObject is cyrnel.services[s].tools.
type toolsObject struct {
	r   *run
	svc *serviceEntry
}

func (t toolsObject) Get(key string) goja.Value {
	r := t.r
	if tool, ok := t.svc.tools[key]; ok {
		return r.toolObject(t.svc, tool)
	}
	if r.inherited(key) {
		return nil
	}
	return r.placeholderTool(fmt.Sprintf("unknown tool %q of service %q; %s", key, t.svc.id, available("tools", t.svc.names)))
}
func (t toolsObject) Has(key string) bool       { _, ok := t.svc.tools[key]; return ok }
func (t toolsObject) Keys() []string            { return append([]string(nil), t.svc.names...) }
func (toolsObject) Set(string, goja.Value) bool { return false }
func (toolsObject) Delete(string) bool          { return false }

func (r *run) toolObject(svc *serviceEntry, tool module.Tool) *goja.Object {
	if obj, ok := svc.toolObjs[tool.ToolID]; ok {
		return obj
	}
	obj := r.vm.NewObject()
	r.must(obj.Set("serviceId", tool.ServiceID))
	r.must(obj.Set("toolId", tool.ToolID))
	r.must(obj.Set("name", tool.Name))
	r.must(obj.Set("description", tool.Description))
	r.must(obj.Set("invoke", r.function("invoke", r.invoker(tool.ServiceID, tool.ToolID))))
	svc.toolObjs[tool.ToolID] = obj
	return obj
}

// invoker is a tool's invoke(params): it returns a promise at once; the call
// runs on another goroutine and settles the promise on the loop.
func (r *run) invoker(serviceID, toolID string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		p, resolve, reject := r.vm.NewPromise()
		errObj := r.newError("ToolError", "")
		r.must(errObj.Set("serviceId", serviceID))
		r.must(errObj.Set("toolId", toolID))
		var params []byte
		if ex := r.vm.Try(func() { params = r.paramsJSON(call.Argument(0), serviceID+"."+toolID) }); ex != nil {
			r.must(reject(ex.Value()))
			return r.vm.ToValue(p)
		}
		r.enqueueTool(&toolCall{serviceID: serviceID, toolID: toolID, params: params, resolve: resolve, reject: reject, errObj: errObj})
		return r.vm.ToValue(p)
	}
}

func (r *run) paramsJSON(v goja.Value, tool string) []byte {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return []byte("{}")
	}
	if !isPlainObject(v) {
		panic(r.vm.NewTypeError("%s: invoke expects a parameters object, got %s", tool, typeName(v)))
	}
	s := r.strictJSON(v, tool+" parameters")
	if !strings.HasPrefix(s, "{") {
		panic(r.vm.NewTypeError("%s: the parameters must serialise to a JSON object, got %s", tool, s))
	}
	return []byte(s)
}

func (r *run) placeholderService(msg string) *goja.Object {
	obj := r.vm.NewObject()
	r.must(obj.Set("tools", r.vm.NewDynamicObject(placeholderTools{r, msg})))
	return obj
}

// placeholderTools is the tools of an unknown service: every tool rejects.
type placeholderTools struct {
	r   *run
	msg string
}

func (p placeholderTools) Get(key string) goja.Value {
	if p.r.inherited(key) {
		return nil
	}
	return p.r.placeholderTool(p.msg)
}
func (placeholderTools) Has(string) bool             { return false }
func (placeholderTools) Keys() []string              { return nil }
func (placeholderTools) Set(string, goja.Value) bool { return false }
func (placeholderTools) Delete(string) bool          { return false }

func (r *run) placeholderTool(msg string) *goja.Object {
	obj := r.vm.NewObject()
	r.must(obj.Set("invoke", r.function("invoke", func(goja.FunctionCall) goja.Value {
		p, _, reject := r.vm.NewPromise()
		r.must(reject(r.newError("ToolError", msg)))
		return r.vm.ToValue(p)
	})))
	return obj
}

func available(kind string, names []string) string {
	if len(names) == 0 {
		return "no " + kind + " are available"
	}
	const shown = 20
	if len(names) > shown {
		return fmt.Sprintf("available %s: %s, … (%d more)", kind, strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return "available " + kind + ": " + strings.Join(names, ", ")
}

// must propagates an error from a runtime call made inside a native
// function: goja turns the panic into a JavaScript exception (or, for an
// interrupt, keeps unwinding).
func (r *run) must(err error) {
	if err != nil {
		panic(err)
	}
}
