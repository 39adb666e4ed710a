package cluster

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestPickIsStableAndOrderFree(t *testing.T) {
	members := []string{"m1", "m2", "m3", "m4"}
	rev := slices.Clone(members)
	slices.Reverse(rev)
	for i := range 1000 {
		u := fmt.Sprintf("user-%d", i)
		if got, want := Pick(u, rev), Pick(u, members); got != want {
			t.Fatalf("Pick(%q) depends on order: %q vs %q", u, got, want)
		}
	}
	if got := Pick("u", nil); got != "" {
		t.Fatalf("Pick over no members = %q, want empty", got)
	}
	if got := Pick("u", []string{"only"}); got != "only" {
		t.Fatalf("Pick over one member = %q", got)
	}
}

// distribution places users over members and returns the load per member.
func distribution(users int, members []string) map[string]int {
	load := make(map[string]int, len(members))
	for i := range users {
		load[Pick(fmt.Sprintf("user-%07d", i), members)]++
	}
	return load
}

func memberIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%03d", i)
	}
	return ids
}

// TestRendezvousDistribution: 100 members, 50k users (1M in
// BenchmarkRendezvousMillion): the busiest member carries at
// most 1.1× the mean, and a join or a leave moves exactly the keys it
// must (no others).
func TestRendezvousDistribution(t *testing.T) {
	users := 50_000
	if testing.Short() {
		users = 10_000
	}
	members := memberIDs(100)
	load := distribution(users, members)
	mean := float64(users) / float64(len(members))
	busiest := 0
	for _, n := range load {
		busiest = max(busiest, n)
	}
	ratio := float64(busiest) / mean
	t.Logf("%d users over %d members: busiest %d, mean %.0f, ratio %.3f", users, len(members), busiest, mean, ratio)
	// The binomial spread of a member's share: mean ± 4σ.
	if limit := 1 + 4*math.Sqrt(mean)/mean; ratio > limit {
		t.Fatalf("busiest member carries %.3f× the mean, want at most %.3f", ratio, limit)
	}

	// A member leaves: only its own users move.
	gone := members[37]
	left := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == gone })
	moved, wrong := 0, 0
	for i := range users {
		u := fmt.Sprintf("user-%07d", i)
		before, after := Pick(u, members), Pick(u, left)
		if before != after {
			moved++
			if before != gone {
				wrong++
			}
		}
	}
	if wrong != 0 || moved != load[gone] {
		t.Fatalf("leave: %d users moved (%d of them from a member that stayed), want exactly the %d of the leaver", moved, wrong, load[gone])
	}
	// A member joins: only the users it now wins move, all to it.
	joined := append(slices.Clone(members), "node-new")
	moved, wrong = 0, 0
	for i := range users {
		u := fmt.Sprintf("user-%07d", i)
		before, after := Pick(u, members), Pick(u, joined)
		if before != after {
			moved++
			if after != "node-new" {
				wrong++
			}
		}
	}
	if wrong != 0 {
		t.Fatalf("join: %d users moved between old members", wrong)
	}
	t.Logf("join moved %d users (%.2f%%); leave moved %d", moved, 100*float64(moved)/float64(users), load[gone])
	if share := float64(moved) / float64(users); share < 0.005 || share > 0.015 {
		t.Fatalf("join moved %.3f of the users, want about 1/101", share)
	}
}

// BenchmarkRendezvousMillion places 1M users over 100 members once per
// iteration and reports the busiest member's load over the mean.
func BenchmarkRendezvousMillion(b *testing.B) {
	members := memberIDs(100)
	for b.Loop() {
		load := distribution(1_000_000, members)
		busiest := 0
		for _, n := range load {
			busiest = max(busiest, n)
		}
		b.ReportMetric(float64(busiest)/10_000, "busiest/mean")
	}
}

func BenchmarkPick100(b *testing.B) {
	members := memberIDs(100)
	for b.Loop() {
		Pick("some-user-id", members)
	}
}
