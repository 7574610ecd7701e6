package process

import "testing"

func TestStreamReassemblesSplitCharacters(t *testing.T) {
	t.Parallel()
	var s stream
	in := []byte("aé€😀z") // 1, 2, 3 and 4 byte characters
	for i := range in {   // one byte per chunk: every split point
		s.write(in[i : i+1])
	}
	s.flush()
	if got := s.text.String(); got != "aé€😀z" {
		t.Fatalf("got %q", got)
	}
}

func TestStreamInvalidAndDangling(t *testing.T) {
	t.Parallel()
	var s stream
	s.write([]byte{'a', 0xff, 'b', 0xe2, 0x82})
	s.flush()
	if got := s.text.String(); got != "a\uFFFDb\uFFFD" {
		t.Fatalf("got %q", got)
	}
}

func TestStreamCap(t *testing.T) {
	t.Parallel()
	s := stream{limit: 5}
	s.write([]byte("abc"))
	s.write([]byte("d€f")) // € would straddle the cap
	if got := s.text.String(); got != "abcd" || !s.truncated {
		t.Fatalf("got %q truncated=%v", got, s.truncated)
	}
	s.write([]byte("more"))
	if s.text.String() != "abcd" {
		t.Fatal("wrote past the cap")
	}
}

func TestStreamHasNoNUL(t *testing.T) {
	t.Parallel()
	var s stream
	s.write([]byte("a\x00b"))
	if got := s.text.String(); got != "a\uFFFDb" {
		t.Fatalf("got %q", got)
	}
}
