// Package testlog has a log sink for tests that read what goroutines of
// the code under test write.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write while a test
// reads it. The zero Buffer is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Bytes returns a copy of what was written so far.
func (w *Buffer) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.b.Bytes())
}

// String returns what was written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
