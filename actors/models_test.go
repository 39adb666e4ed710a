package actors

import (
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A models request reads every page of model/list: the fake answers two
// models a page, the caller gets all of them, in order, the hidden ones
// only when asked.
func TestModelsEveryPage(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{ModelPageSize: 2}, nil)
	c := h.caller()
	for _, tt := range []struct {
		hidden  bool
		want    int
		last    string
		nHidden int
	}{
		{false, 9, "gpt-5.5", 0},
		{true, 12, "codex-auto-review", 3},
	} {
		h.engine.SendWithSender(h.root, messages.ModelsRequest{User: "pia", IncludeHidden: tt.hidden}, c.pid)
		res := expect[messages.ModelsResponse](t, c)
		n := 0
		for _, m := range res.Models {
			if m.Hidden {
				n++
			}
		}
		if res.Error != "" || len(res.Models) != tt.want || res.Models[0].ID != "gpt-6.1-sol" || res.Models[len(res.Models)-1].ID != tt.last || n != tt.nHidden {
			t.Errorf("include_hidden %v: %d models (%d hidden), error %q; want %d ending with %s, %d hidden", tt.hidden, len(res.Models), n, res.Error, tt.want, tt.last, tt.nHidden)
		}
		if m := res.Models[0]; len(m.InputModalities) != 2 || m.InputModalities[1] != "image" || len(m.Efforts) != 6 {
			t.Errorf("first model %+v, want text and image, six efforts", m)
		}
	}
}
