package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Two daemons of one host with homes of their own never give one uid to
// two homes: alice on the first and alice on the second get different
// uids, each claimed on the host by her folder's path; each gets hers
// again after a restart.
func TestHostClaimsUniquePerHost(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 232000, Hi: 232009}
	claims := filepath.Join(t.TempDir(), "uids")
	none := func() map[uint32]bool { return nil }
	homesA, homesB := t.TempDir(), t.TempDir()
	a := newTestNode(t, Options{Homes: homesA, UIDs: r, HostClaims: claims, InUse: none})
	b := newTestNode(t, Options{Homes: homesB, UIDs: r, HostClaims: claims, InUse: none})
	la, err := a.Prepare(filepath.Join(homesA, "alice", ".codex"), "")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Prepare(filepath.Join(homesB, "alice", ".codex"), "")
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := la.Credential.Uid, lb.Credential.Uid
	if ua == ub {
		t.Fatalf("both daemons gave alice uid %d", ua)
	}
	for uid, dir := range map[uint32]string{ua: filepath.Join(homesA, "alice"), ub: filepath.Join(homesB, "alice")} {
		got, err := readHostClaim(filepath.Join(claims, strconv.FormatUint(uint64(uid), 10)))
		if err != nil || got != dir {
			t.Errorf("host claim of uid %d: %q, %v; want %s", uid, got, err, dir)
		}
	}
	// A restart of the second daemon: alice keeps her uid.
	b2 := newTestNode(t, Options{Homes: homesB, UIDs: r, HostClaims: claims, InUse: none})
	if l, err := b2.Prepare(filepath.Join(homesB, "alice", ".codex"), ""); err != nil || l.Credential.Uid != ub {
		t.Fatalf("after a restart: %+v, %v; want uid %d", l.Credential, err, ub)
	}
	// A home the other deployment's uid owns (given by hand) is refused.
	bad := filepath.Join(homesB, "mallory", ".codex")
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(bad, int(ua), int(ua)); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Prepare(bad, ""); err == nil || !strings.Contains(err.Error(), "on this host") {
		t.Errorf("a home owned by another deployment's uid: %v, want a refusal naming the host claim", err)
	}
}

// A new user never gets a uid something outside the homes uses, and a
// removed deployment's host claim is taken over, while one whose homes
// root is missing (not mounted) is kept.
func TestHostClaimsInUseAndStale(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 232100, Hi: 232101}
	claims := filepath.Join(t.TempDir(), "uids")
	homes := t.TempDir()
	busy := r.Lo
	n := newTestNode(t, Options{Homes: homes, UIDs: r, HostClaims: claims,
		InUse: func() map[uint32]bool { return map[uint32]bool{busy: true} }})
	l, err := n.Prepare(filepath.Join(homes, "u1", ".codex"), "")
	if err != nil || l.Credential.Uid != r.Hi {
		t.Fatalf("u1: %+v %v; want uid %d, %d being in use", l.Credential, err, r.Hi, busy)
	}
	if _, err := n.Prepare(filepath.Join(homes, "u2", ".codex"), ""); err == nil {
		t.Fatal("u2 got the uid in use")
	}
	// Stale: a claim of a removed user folder under an existing root.
	gone := filepath.Join(t.TempDir(), "bob")
	if err := os.WriteFile(filepath.Join(claims, strconv.FormatUint(uint64(r.Lo), 10)), []byte(gone+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n2 := newTestNode(t, Options{Homes: homes, UIDs: r, HostClaims: claims, InUse: func() map[uint32]bool { return nil }})
	if l, err := n2.Prepare(filepath.Join(homes, "u3", ".codex"), ""); err != nil || l.Credential.Uid != r.Lo {
		t.Fatalf("u3: %+v %v; want the stale claim's uid %d", l.Credential, err, r.Lo)
	}
	// Kept: a claim whose homes root is missing.
	if !staleHolder(filepath.Join(t.TempDir(), "bob")) || staleHolder("/nonexistent-root-xyz/bob") {
		t.Error("staleHolder: a removed folder under a present root is stale, one under a missing root is not")
	}
}
