// Package textout writes reports line by line, keeping the first write error, so a table or a report can be
// written without checking every line.
package textout

import (
	"fmt"
	"io"
)

// Writer formats onto W until a write fails; Err is the first failure.
type Writer struct {
	W   io.Writer
	Err error
}

// Printf writes like fmt.Fprintf, unless an earlier write failed.
func (w *Writer) Printf(format string, args ...any) {
	if w.Err == nil {
		_, w.Err = fmt.Fprintf(w.W, format, args...)
	}
}
