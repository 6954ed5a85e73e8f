package replay

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzLineReader: lineReader splits any input as bytes.Split on newlines
// does, a line longer than max (with its newline) reported long and
// empty, the last line without a newline reported so.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 3)
	f.Add([]byte("0123456789\n01\n"), 4)
	f.Add([]byte(""), 1)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 1 || max > 64 {
			return
		}
		want := bytes.Split(in, []byte("\n"))
		if len(in) == 0 || in[len(in)-1] == '\n' {
			want = want[:len(want)-1] // no line after the last newline
		}
		lr := lineReader{r: bufio.NewReaderSize(bytes.NewReader(in), 16), max: max}
		for i, w := range want {
			line, newline, long, err := lr.next()
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			last := i == len(want)-1 && (len(in) == 0 || in[len(in)-1] != '\n')
			size := len(w) + 1
			if last {
				size--
			}
			if newline == last || long != (size > max) || (!long && !bytes.Equal(line, w)) || (long && len(line) != 0) {
				t.Fatalf("line %d = %q, newline %v, long %v; want %q, newline %v, long %v", i+1, line, newline, long, w, !last, size > max)
			}
		}
		if _, _, _, err := lr.next(); !errors.Is(err, io.EOF) {
			t.Errorf("after the last line: %v, want io.EOF", err)
		}
	})
}
