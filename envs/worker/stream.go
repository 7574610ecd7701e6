package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// maxMessage bounds one protocol message from a worker: the worker side is
// untrusted, and a message is held whole in host memory while it is read.
// While an execution runs, its own output limit bounds them (frameLimit).
const maxMessage = 16 << 20

// frameEnvelope is what a message may hold besides the value an execution's
// output limit bounds: the JSON-RPC envelope, a path, a method name.
const frameEnvelope = 64 << 10

// frameLimit is the largest message a worker may send while an execution
// with this output limit runs (0: no cap): what the host reads and decodes
// for it is bounded by its own limit.
func frameLimit(outputLimit int64) int64 {
	if outputLimit <= 0 {
		return maxMessage
	}
	return min(outputLimit+frameEnvelope, maxMessage)
}

// errMessageTooLarge ends the stream (and so the worker) when a message
// goes past the stream's limit.
var errMessageTooLarge = errors.New("worker protocol message larger than its limit")

// lineStream is the protocol's framing, newline-delimited JSON, with a bound
// on what one line may hold (jsonrpc2's plain stream has none).
type lineStream struct {
	rw io.ReadWriteCloser
	r  *bufio.Reader
	// limit bounds one line (0: maxMessage); it changes while reading.
	limit atomic.Int64
	// tooLarge, when set, is called once a line passes limit, before
	// anything else learns of it.
	tooLarge func()
	// failed keeps the error that ended reading, so the host can say why a
	// worker's stream broke (a message past its limit is an output limit).
	failed atomic.Pointer[error]
}

func newLineStream(rw io.ReadWriteCloser) *lineStream {
	return &lineStream{rw: rw, r: bufio.NewReader(rw)}
}

// setLimit bounds the lines read from now on (0: maxMessage).
func (s *lineStream) setLimit(n int64) { s.limit.Store(n) }

// ReadObject reads one line and decodes it into v. jsonrpc2 ends the
// connection on the first error.
func (s *lineStream) ReadObject(v any) error {
	line, err := s.readLine()
	if err == nil {
		if err = json.Unmarshal(line, v); err != nil {
			err = fmt.Errorf("worker protocol: %w", err)
		}
	}
	return s.fail(err)
}

// fail records the error that ended reading.
func (s *lineStream) fail(err error) error {
	if err != nil && s.failed.CompareAndSwap(nil, &err) && errors.Is(err, errMessageTooLarge) && s.tooLarge != nil {
		s.tooLarge()
	}
	return err
}

// err is the error that ended reading, nil while the stream is read.
func (s *lineStream) err() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// readLine reads one line, refusing it as soon as it passes the limit:
// nothing of a line past the limit is held or decoded.
func (s *lineStream) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		limit := s.limit.Load()
		if limit <= 0 {
			limit = maxMessage
		}
		if int64(len(line)+len(chunk)) > limit {
			return nil, errMessageTooLarge
		}
		line = append(line, chunk...)
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(bytes.TrimSpace(line)) > 0 && errors.Is(err, io.EOF) {
				return line, nil // a last message without its newline
			}
			return nil, err
		}
	}
}

// WriteObject writes v as one line; jsonrpc2 serialises calls.
func (s *lineStream) WriteObject(v any) error {
	var b []byte
	var err error
	if m, ok := v.(json.Marshaler); ok {
		// jsonrpc2's messages marshal themselves with encoding/json, so
		// their JSON is compact already; json.Marshal would check and
		// compact the whole message once more. A newline (one that is not
		// compact) is looked for at memchr speed: the framing needs none.
		if b, err = m.MarshalJSON(); err == nil && bytes.IndexByte(b, '\n') >= 0 {
			var c bytes.Buffer
			if err = json.Compact(&c, b); err == nil {
				b = c.Bytes()
			}
		}
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = s.rw.Write(append(b, '\n'))
	return err
}

func (s *lineStream) Close() error { return s.rw.Close() }

// rpcStream is the worker's side of the protocol as jsonrpc2 reads it. The
// library decodes a request's params, and an answer's result and error,
// into a tree of Go values (a number costs about forty bytes) and encodes
// the params back before its handler sees them: a frame of numbers would
// cost the host forty times its size. So each message is read here with
// its values left undecoded. A request's params stay here (paramsOf): the
// library hands each request to its handler on its read loop, before it
// reads the next message. An answer's result travels boxed in one JSON
// string (unbox opens it), since its caller reads it later. Either way the
// host pays a few copies of the bytes, whatever they hold.
type rpcStream struct {
	*lineStream
	params json.RawMessage // of the request read last; nil: it had none
}

// message is a JSON-RPC message with its values undecoded.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method *string         `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Error: the host reads only code and message of an error answer.
	Error *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// boxed is a message as handed to jsonrpc2: no params, the result a string.
type boxed struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  *string         `json:"method,omitempty"`
	Result  *string         `json:"result,omitempty"`
	Error   any             `json:"error,omitempty"`
}

func (s *rpcStream) ReadObject(v any) error {
	line, err := s.readLine()
	if err == nil {
		if line, err = s.box(line); err == nil {
			err = json.Unmarshal(line, v)
		}
		if err != nil {
			err = fmt.Errorf("worker protocol: %w", err)
		}
	}
	return s.fail(err)
}

// box keeps a message's params and rewrites it with its result as a JSON
// string. Invalid UTF-8 in a result becomes U+FFFD on the way.
func (s *rpcStream) box(line []byte) ([]byte, error) {
	var m message
	s.params = nil
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	if len(m.ID) > 0 && m.ID[0] != '"' && m.ID[0] != '-' && (m.ID[0] < '0' || m.ID[0] > '9') && string(m.ID) != "null" {
		return nil, fmt.Errorf("an id must be a string or a number, not %.20s", m.ID)
	}
	b := boxed{JSONRPC: "2.0", ID: m.ID, Method: m.Method}
	if m.Result != nil {
		r := string(m.Result)
		b.Result = &r
	}
	if m.Error != nil {
		b.Error = m.Error
	}
	if m.Method != nil {
		s.params = m.Params
	}
	return json.Marshal(b)
}

// paramsOf is the params of the request jsonrpc2 is handing its handler, as
// the worker wrote them (valid JSON, perhaps not valid UTF-8); nil when it
// sent none. Only a handler called on the stream's read loop may ask.
func (s *rpcStream) paramsOf() json.RawMessage { return s.params }

// unbox opens a result rpcStream boxed: the JSON the worker wrote.
func unbox(raw json.RawMessage) (json.RawMessage, error) {
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return nil, fmt.Errorf("worker protocol: a result not boxed by the stream: %w", err)
	}
	return json.RawMessage(str), nil
}
