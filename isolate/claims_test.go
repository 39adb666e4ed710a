package isolate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
}

func claimPath(homes string, uid uint32) string {
	return filepath.Join(homes, claimsDir, strconv.FormatUint(uint64(uid), 10))
}

// TestUIDClaimsTwoMembers: two members sharing one homes folder give 50
// users, started at once on either, 50 different uids, each claimed under
// its user's name.
func TestUIDClaimsTwoMembers(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 231000, Hi: 231079} // hash starts collide often in 80
	homes := t.TempDir()
	members := []*Node{newTestNode(t, Options{Homes: homes, UIDs: r}), newTestNode(t, Options{Homes: homes, UIDs: r})}
	uids := make([]uint32, 50)
	errs := make([]error, 50)
	var wg sync.WaitGroup
	for i := range uids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := members[i%2].Prepare(filepath.Join(homes, fmt.Sprintf("u%d", i), ".codex"), "")
			if err == nil {
				uids[i] = l.Credential.Uid
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	seen := map[uint32]int{}
	for i, uid := range uids {
		if errs[i] != nil {
			t.Fatalf("u%d: %v", i, errs[i])
		}
		if j, dup := seen[uid]; dup {
			t.Errorf("u%d and u%d both got uid %d", i, j, uid)
		}
		seen[uid] = i
		if b, err := os.ReadFile(claimPath(homes, uid)); err != nil || string(b) != fmt.Sprintf("u%d\n", i) {
			t.Errorf("u%d: claim of uid %d is %q, %v", i, uid, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(homes, claimsDir)); err != nil || fi.Mode().Perm() != 0o700 || owner(t, filepath.Join(homes, claimsDir)) != 0 {
		t.Errorf("claims folder: %v, %v; want the daemon's, 0700", fi, err)
	}
}

// TestUIDClaimSeenAfterScan: a member that scanned the homes before
// another member allocated a uid does not give that uid to a new user
// whose hash starts at it; the homes its scan found got their claims.
func TestUIDClaimSeenAfterScan(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 232000, Hi: 232002}
	homes := t.TempDir()
	home := func(u string) string { return filepath.Join(homes, u, ".codex") }
	if err := os.MkdirAll(home("old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(home("old"), int(r.Lo), int(r.Lo)); err != nil {
		t.Fatal(err)
	}
	a := newTestNode(t, Options{Homes: homes, UIDs: r})
	b := newTestNode(t, Options{Homes: homes, UIDs: r})
	if _, err := b.Prepare(home("old"), ""); err != nil { // b scans now
		t.Fatal(err)
	}
	if got, err := os.ReadFile(claimPath(homes, r.Lo)); err != nil || string(got) != "old\n" {
		t.Errorf("scanned home's claim: %q, %v", got, err)
	}
	l, err := a.Prepare(home("bob"), "")
	if err != nil {
		t.Fatal(err)
	}
	bob := l.Credential.Uid
	// A new user whose first candidate is bob's uid.
	carol := ""
	for i := 0; carol == ""; i++ {
		name := fmt.Sprintf("c%d", i)
		h := fnv.New64a()
		h.Write([]byte(name))
		if r.Lo+uint32(h.Sum64()%3) == bob {
			carol = name
		}
	}
	l, err = b.Prepare(home(carol), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Credential.Uid; got == bob || got == r.Lo || !r.has(got) {
		t.Errorf("%s got uid %d; bob has %d, old %d", carol, got, bob, r.Lo)
	}
	// The range is full now, on both members.
	for _, n := range []*Node{a, b} {
		if _, err := n.Prepare(home("dave"), ""); err == nil || !strings.Contains(err.Error(), "every uid") {
			t.Errorf("a fourth user in a range of three: %v", err)
		}
	}
}

// TestUIDClaimOfAnotherUser: a home whose uid is claimed by another user
// is not served under it, and the home is left as it was.
func TestUIDClaimOfAnotherUser(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 233000, Hi: 233009}
	homes := t.TempDir()
	home := filepath.Join(homes, "alice", ".codex")
	if err := os.MkdirAll(filepath.Join(homes, claimsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claimPath(homes, 233004), []byte("mallory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(home, 233004, 233004); err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, Options{Homes: homes, UIDs: r})
	_, err := n.Prepare(home, "")
	if !errors.Is(err, errClaimed) || !strings.Contains(err.Error(), "owns another home") || !strings.Contains(err.Error(), "mallory") {
		t.Errorf("home on a uid claimed by mallory: %v", err)
	}
	if o := owner(t, home); o != 233004 {
		t.Errorf("home now owned by %d", o)
	}
	// A new user never gets mallory's uid (mallory's home is gone: the
	// claim stays).
	for i := range 9 {
		l, err := n.Prepare(filepath.Join(homes, fmt.Sprintf("u%d", i), ".codex"), "")
		if err != nil {
			t.Fatal(err)
		}
		if l.Credential.Uid == 233004 {
			t.Fatalf("u%d got the uid claimed by mallory", i)
		}
	}
}

// TestUIDClaimDamaged: a claim that is not a user's name, or not a file,
// gives a clear error, not a uid and not a panic.
func TestUIDClaimDamaged(t *testing.T) {
	needRoot(t)
	r := Range{Lo: 234000, Hi: 234000}
	for _, c := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("\x00\xff"), 0o600) }, "does not name a user folder"},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, "does not name a user folder"},
		{"dotted", func(p string) error { return os.WriteFile(p, []byte("../x\n"), 0o600) }, "does not name a user folder"},
		{"huge", func(p string) error { return os.WriteFile(p, []byte(strings.Repeat("a", 1000)+"\n"), 0o600) }, "not a small regular file"},
		{"folder", func(p string) error { return os.Mkdir(p, 0o700) }, "not a small regular file"},
		{"symlink", func(p string) error { return os.Symlink("/etc/hostname", p) }, "not a small regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			homes := t.TempDir()
			if err := os.MkdirAll(filepath.Join(homes, claimsDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := c.make(claimPath(homes, r.Lo)); err != nil {
				t.Fatal(err)
			}
			n := newTestNode(t, Options{Homes: homes, UIDs: r})
			l, err := n.Prepare(filepath.Join(homes, "alice", ".codex"), "")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "234000") {
				t.Errorf("Prepare: %+v, %v; want an error saying %q", l, err, c.want)
			}
		})
	}
}
