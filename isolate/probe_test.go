package isolate

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProbeTakesNoUsersUID: a probe runs as the range's highest uid in a
// home of its own, claims nothing, and a node that scans the homes while
// the probe's folder is there neither takes it for a user's home nor
// withholds its uid from a user.
func TestProbeTakesNoUsersUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	homes := t.TempDir()
	r := Range{Lo: 231000, Hi: 231000} // one uid: the probe's and the next user's
	n := newTestNode(t, Options{Homes: homes, UIDs: r})
	if _, err := n.Probe(filepath.Join(homes, "alice", ".codex"), ""); err == nil {
		t.Error("Probe accepted a user's home")
	}
	probe := filepath.Join(homes, ProbePrefix+"x", ".codex")
	l, err := n.Probe(probe, "")
	if err != nil {
		t.Fatal(err)
	}
	if l.Credential == nil || l.Credential.Uid != r.Hi {
		t.Fatalf("probe credential %+v, want uid %d", l.Credential, r.Hi)
	}
	if o := owner(t, probe); o != r.Hi {
		t.Errorf("probe home owned by %d, want %d", o, r.Hi)
	}
	if _, err := os.Stat(filepath.Join(homes, claimsDir)); err == nil {
		t.Error("the probe claimed a uid")
	}
	// A node starting now scans the probe's folder too.
	m := newTestNode(t, Options{Homes: homes, UIDs: r})
	l, err = m.Prepare(filepath.Join(homes, "alice", ".codex"), "")
	if err != nil {
		t.Fatalf("alice beside a probe: %v", err)
	}
	if l.Credential.Uid != r.Hi {
		t.Errorf("alice got uid %d, want %d", l.Credential.Uid, r.Hi)
	}
}
