// Package syncbuf is a text buffer tests can hand to goroutines (a logger
// of the actors, an exec copier) and read while they write.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer is a strings.Builder under a mutex. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
