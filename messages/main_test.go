package messages

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutines; the check keeps it so (a decoder
// that spawned one per message would leak here first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
