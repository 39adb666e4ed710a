package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// The cap's choice: the least recently used idle app-servers, as many as
// the node is over, never a busy one nor the one that just started.
func TestCapVictims(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pid := func(id string) *actor.PID { return actor.NewPID("local", id) }
	live := map[string]liveUse{}
	add := func(id string, age int, busy bool) {
		live[pid(id).String()] = liveUse{pid: pid(id), lastUse: t0.Add(-time.Duration(age) * time.Second), busy: busy}
	}
	add("a", 30, false)
	add("b", 20, true)
	add("c", 10, false)
	add("d", 0, false)
	ids := func(ps []*actor.PID) (out []string) {
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	for _, tt := range []struct {
		max  int
		self string
		want []string
	}{
		{4, "", nil},
		{3, "", []string{"a"}},
		{2, "", []string{"a", "c"}},
		{2, "a", []string{"c", "d"}},
		{0, "", []string{"a", "c", "d"}}, // the busy one stays, over the cap
	} {
		var self *actor.PID
		if tt.self != "" {
			self = pid(tt.self)
		}
		if got := ids(victims(live, self, tt.max)); !slices.Equal(got, tt.want) {
			t.Errorf("victims(max %d, self %q) = %v, want %v", tt.max, tt.self, got, tt.want)
		}
	}
}
