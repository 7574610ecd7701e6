package process

import (
	"fmt"
	"io"
	"os"
)

// fileSpool keeps the content of the files a one-shot program left on disk
// while its run lasts, one after the other in a temporary file: a run holds
// none of it in memory, and finish stores it a part at a time.
type fileSpool struct {
	dir  string // where the temporary file is made ("": the system's)
	f    *os.File
	size int64
	at   []int64 // where each file begins
}

// write appends data to the last file, or begins a new one.
func (s *fileSpool) write(data []byte, begin bool) error {
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "cyrnel-process-files-")
		if err != nil {
			return fmt.Errorf("spool a process file: %w", err)
		}
		s.f = f
	}
	if begin {
		s.at = append(s.at, s.size)
	}
	n, err := s.f.WriteAt(data, s.size)
	s.size += int64(n)
	if err != nil {
		return fmt.Errorf("spool a process file: %w", err)
	}
	return nil
}

// dropLast forgets the last file begun (it is kept whole or not at all).
func (s *fileSpool) dropLast() {
	if len(s.at) == 0 {
		return
	}
	s.size = s.at[len(s.at)-1]
	s.at = s.at[:len(s.at)-1]
	if s.f != nil {
		_ = s.f.Truncate(s.size)
	}
}

// reader reads file i, of size bytes, again each time it is asked.
func (s *fileSpool) reader(i int, size int64) io.Reader {
	return io.NewSectionReader(s.f, s.at[i], size)
}

// close removes the spool.
func (s *fileSpool) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
	s.size, s.at = 0, nil
}
