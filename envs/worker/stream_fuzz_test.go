package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// nopCloser gives a reader and writer the stream's Close.
type nopCloser struct {
	io.Reader
	io.Writer
}

func (nopCloser) Close() error { return nil }

// FuzzLineStreamRead feeds arbitrary bytes from the untrusted worker side to
// the framing: it must never panic, every message it yields must be one line
// of valid JSON no larger than maxMessage, and it must end on an error.
func FuzzLineStreamRead(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"ready","params":{}}` + "\n",
		`{"jsonrpc":"2.0","id":0,"result":{"exit":"success"}}` + "\n" + `{"jsonrpc":"2.0","method":"output","params":{"patch":{"a":1}}}`,
		"\n\n{}\n",
		`{"unterminated":`,
		"\xff\xfe\x00garbage\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newLineStream(nopCloser{Reader: bytes.NewReader(data), Writer: io.Discard})
		for i := 0; ; i++ {
			var m json.RawMessage
			err := s.ReadObject(&m)
			if err != nil {
				if errors.Is(err, errMessageTooLarge) && len(data) <= maxMessage {
					t.Fatalf("a %d-byte input cannot hold an over-long message", len(data))
				}
				return
			}
			if !json.Valid(m) || len(m) > maxMessage {
				t.Fatalf("message %d is not one valid JSON value: %q", i, m)
			}
			if i > len(data) {
				t.Fatalf("more messages than input bytes")
			}
		}
	})
}

// FuzzLineStreamRoundTrip writes any JSON value through the framing and reads
// it back unchanged: as a value, and as the params of a jsonrpc2 request
// (which marshals itself) written as they came, whitespace and all.
func FuzzLineStreamRoundTrip(f *testing.F) {
	f.Add(`{"patch":{"a":"line\nbreak"}}`)
	f.Add("{\n  \"a\": [1,\n    2]\n}\n")
	f.Add(`"\u2028"`)
	f.Add(`[1,2,{"x":null}]`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, in string) {
		var v any
		if json.Unmarshal([]byte(in), &v) != nil {
			return
		}
		var buf bytes.Buffer
		w := newLineStream(nopCloser{Reader: &buf, Writer: &buf})
		if err := w.WriteObject(v); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := w.ReadObject(&got); err != nil {
			t.Fatalf("read back %q: %v", buf.String(), err)
		}
		want, _ := json.Marshal(v)
		back, _ := json.Marshal(got)
		if !bytes.Equal(want, back) {
			t.Fatalf("round trip changed %s into %s", want, back)
		}
		buf.Reset()
		if err := w.WriteObject(verbatim(in)); err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 {
			t.Fatalf("a marshaler's JSON written as %d lines: %q", n, buf.String())
		}
		got = nil
		if err := w.ReadObject(&got); err != nil {
			t.Fatalf("read back %q: %v", buf.String(), err)
		}
		if back, _ = json.Marshal(got); !bytes.Equal(want, back) {
			t.Fatalf("round trip of a marshaler changed %s into %s", want, back)
		}
		raw := json.RawMessage(in)
		buf.Reset()
		if err := w.WriteObject(&jsonrpc2.Request{Method: "m", Params: &raw}); err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 {
			t.Fatalf("a request written as %d lines: %q", n, buf.String())
		}
		var req jsonrpc2.Request
		if err := w.ReadObject(&req); err != nil {
			t.Fatalf("read back %q: %v", buf.String(), err)
		}
		if req.Params == nil {
			t.Fatalf("params lost: %q", buf.String())
		}
		var params any
		if err := json.Unmarshal(*req.Params, &params); err != nil {
			t.Fatal(err)
		}
		if back, _ = json.Marshal(params); !bytes.Equal(want, back) {
			t.Fatalf("round trip as params changed %s into %s", want, back)
		}
	})
}

// verbatim is a json.Marshaler that gives its JSON as it was written,
// whitespace and newlines included.
type verbatim string

func (v verbatim) MarshalJSON() ([]byte, error) { return []byte(v), nil }

// FuzzRPCStreamRead: whatever the worker writes, the messages handed to
// jsonrpc2 carry no params and a result only as a string, so the library
// never decodes a worker's values; the params kept for the handler are
// JSON, and a result unboxes.
func FuzzRPCStreamRead(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"output","params":{"patch":{"a":[1,2,3]}}}` + "\n",
		`{"jsonrpc":"2.0","id":"x","result":{"status":"success"}}` + "\n",
		`{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m","data":[1,2]}}` + "\n",
		`{"jsonrpc":"2.0","id":[1,1,1],"result":1}` + "\n",
		`{"jsonrpc":"2.0","id":1,"method":"invokeTool","params":{"x":"\xff"}}` + "\n",
		`[{"jsonrpc":"2.0","method":"a"}]` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &rpcStream{lineStream: newLineStream(nopCloser{Reader: bytes.NewReader(data), Writer: io.Discard})}
		for {
			var handed map[string]json.RawMessage
			if err := s.ReadObject(&handed); err != nil {
				return
			}
			if _, ok := handed["params"]; ok {
				t.Fatalf("params handed to jsonrpc2: %s", handed["params"])
			}
			if r, ok := handed["result"]; ok {
				if _, err := unbox(r); err != nil {
					t.Fatalf("result %s does not unbox: %v", r, err)
				}
			}
			if p := s.paramsOf(); p != nil && !json.Valid(p) {
				t.Fatalf("params kept are not JSON: %q", p)
			}
			var req jsonrpc2.Request
			if handed["method"] != nil {
				raw, _ := json.Marshal(handed)
				if err := json.Unmarshal(raw, &req); err == nil && req.Params != nil {
					t.Fatalf("jsonrpc2 sees params %s", *req.Params)
				}
			}
		}
	})
}
