package actors

import (
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestAppServerReadyNamesCLIVersion: the ready event carries the version
// the CLI's initialize reported and whether it is in the tested range; a
// CLI outside it (here one newer than the pin) is marked untested, which
// the start logs as a warning.
func TestAppServerReadyNamesCLIVersion(t *testing.T) {
	pin := codexproto.PinnedCLI()
	newer := codexproto.Version{Major: pin.Major, Minor: pin.Minor + 1}
	for _, tt := range []struct {
		name    string
		version string // the fake's; "" is the pin
		want    codexproto.Version
		tested  bool
	}{
		{"pinned", "", pin, true},
		{"newer than the pin", newer.String(), newer, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := fakeHarness(t, fakeappserver.Config{Version: tt.version}, nil)
			events := tapEvents(t, h.engine)
			r := h.round(h.caller(), messages.StartRound{User: "vera", Thread: "t-v", Text: "hi"})
			mustStatus(t, r, messages.StatusCompleted)
			ev := waitEvent(t, events, 0, waitFor, "of vera's app-server ready", func(e AppServerReady) bool { return e.User == "vera" })
			if ev.Version != tt.want || ev.Tested != tt.tested {
				t.Errorf("AppServerReady = %+v, want version %v tested %v (range %s)", ev, tt.want, tt.tested, codexproto.TestedRange())
			}
		})
	}
}
