package actors

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

func TestMain(m *testing.M) {
	// Re-executed as a fake app-server (see testkit/fakeappserver).
	if os.Getenv(fakeappserver.EnvVar) != "" {
		fakeappserver.Main()
	}
	goleak.VerifyTestMain(m)
}
