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
const maxMessage = 16 << 20

// errMessageTooLarge ends the stream (and so the worker) when a message
// goes past maxMessage.
var errMessageTooLarge = errors.New("worker protocol message larger than 16 MiB")

// lineStream is the protocol's framing, newline-delimited JSON, with a bound
// on what one line may hold (jsonrpc2's plain stream has none).
type lineStream struct {
	rw io.ReadWriteCloser
	r  *bufio.Reader
	// failed keeps the error that ended reading, so the host can say why a
	// worker's stream broke (a message past maxMessage is an output limit).
	failed atomic.Pointer[error]
}

func newLineStream(rw io.ReadWriteCloser) *lineStream {
	return &lineStream{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)}
}

// ReadObject reads one line and decodes it into v. jsonrpc2 ends the
// connection on the first error.
func (s *lineStream) ReadObject(v any) error {
	err := s.readObject(v)
	if err != nil {
		s.failed.CompareAndSwap(nil, &err)
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

func (s *lineStream) readObject(v any) error {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > maxMessage {
			return errMessageTooLarge
		}
		line = append(line, chunk...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(bytes.TrimSpace(line)) > 0 && errors.Is(err, io.EOF) {
				break // a last message without its newline
			}
			return err
		}
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("worker protocol: %w", err)
	}
	return nil
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
