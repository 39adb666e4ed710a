package actors

import "testing"

func TestHashUserInPID(t *testing.T) {
	alice, hostile := userTag("alice"), userTag("a/codex/main")
	for _, c := range []struct{ in, want string }{
		{"127.0.0.1:4100/meshweaver/root/user/alice", "127.0.0.1:4100/meshweaver/root/user/" + alice},
		{"meshweaver/root/user/alice/codex/main", "meshweaver/root/user/" + alice + "/codex/main"},
		{"127.0.0.1:4100/meshweaver/root/user/alice/log/r1/round/r1", "127.0.0.1:4100/meshweaver/root/user/" + alice + "/log/r1/round/r1"},
		{"meshweaver/root/user/a/codex/main/log/r1", "meshweaver/root/user/" + hostile + "/log/r1"},
		{"meshweaver/root/cap/main", "meshweaver/root/cap/main"},
		{"no pid here", "no pid here"},
	} {
		if got := HashUserInPID(c.in); got != c.want {
			t.Errorf("HashUserInPID(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
