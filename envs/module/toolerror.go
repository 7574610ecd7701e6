package module

// ToolError is a failed tool call in terms a program can act on: Code says
// what kind of failure it was, Status is the upstream's HTTP status when one
// answered, Details names what failed (for invalid parameters, the failing
// fields as [{path, message}]). Runtimes hand all three to programs
// (Python's cyrnel.ToolError has .code, .status and .details).
type ToolError struct {
	Code    ToolErrorCode
	Status  int
	Details any
	Err     error
}

// ToolErrorCode is the kind of a failed tool call (docs/protocol.md).
type ToolErrorCode string

// The kinds of failed tool calls. A non-2xx answer of an upstream is a
// result, not an error (DESIGN §6): upstream_error is an answer that could
// not be used.
const (
	ToolInvalidParameters ToolErrorCode = "invalid_parameters" // the parameters do not fit the tool's input schema
	ToolNotFound          ToolErrorCode = "not_found"          // no such service or tool
	ToolUnavailable       ToolErrorCode = "unavailable"        // the service or tool is disabled
	ToolTransportError    ToolErrorCode = "transport_error"    // no answer: connection refused, DNS, TLS, timeout
	ToolUpstreamError     ToolErrorCode = "upstream_error"     // an answer that cannot be used (e.g. larger than the limit)
	ToolFailed            ToolErrorCode = "tool_error"         // any other failure of the tool's adapter
	ToolBlocked           ToolErrorCode = "blocked"            // the operator's tool policy blocks the call
	ToolDenied            ToolErrorCode = "denied"             // the human approval the call needed was denied or expired
)

func (e *ToolError) Error() string { return e.Err.Error() }
func (e *ToolError) Unwrap() error { return e.Err }
