package isolate

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    Range
		wantErr bool
	}{
		{"200000-299999", Range{200000, 299999}, false},
		{"5-5", Range{5, 5}, false},
		{"off", Range{}, false},
		{"", Range{}, false},
		{"0-10", Range{}, true},
		{"10-5", Range{}, true},
		{"10", Range{}, true},
		{"1-4294967295", Range{}, true},
		{"a-b", Range{}, true},
	} {
		got, err := ParseRange(c.in)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func newTestNode(t *testing.T, opts Options) *Node {
	t.Helper()
	if opts.Homes == "" {
		opts.Homes = t.TempDir()
	}
	n, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func owner(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// TestUIDAllocation: every user gets a uid of the range of their own, the
// home's owner keeps it across a new Node (a restart), a home of old gets
// everything in it handed over, and a uid owning two homes is refused.
func TestUIDAllocation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	r := Range{Lo: 230000, Hi: 230002}
	homes := t.TempDir()
	home := func(u string) string { return filepath.Join(homes, u, ".codex") }
	// A home from before isolation, with a file the daemon wrote.
	if err := os.MkdirAll(filepath.Join(home("old"), "sessions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home("old"), "sessions", "r.jsonl"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, Options{Homes: homes, UIDs: r})
	got := map[string]uint32{}
	for _, u := range []string{"alice", "bob", "old"} {
		l, err := n.Prepare(home(u), "")
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if l.Credential == nil || l.Credential.Uid != l.Credential.Gid || !r.has(l.Credential.Uid) {
			t.Fatalf("%s: credential %+v, want a uid of %v", u, l.Credential, r)
		}
		got[u] = l.Credential.Uid
		if o := owner(t, home(u)); o != l.Credential.Uid {
			t.Errorf("%s: home owned by %d, want %d", u, o, l.Credential.Uid)
		}
		if !slices.Contains(l.Env, "HOME="+home(u)) {
			t.Errorf("%s: env %v, want HOME=%s", u, l.Env, home(u))
		}
	}
	if got["alice"] == got["bob"] || got["bob"] == got["old"] || got["alice"] == got["old"] {
		t.Errorf("uids shared: %v", got)
	}
	if o := owner(t, filepath.Join(home("old"), "sessions", "r.jsonl")); o != got["old"] {
		t.Errorf("old home's file owned by %d, want %d", o, got["old"])
	}
	for _, d := range []string{homes, filepath.Dir(home("alice"))} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o711 || owner(t, d) != 0 {
			t.Errorf("%s: mode %v owner %d, want 0711 root's", d, fi.Mode().Perm(), owner(t, d))
		}
	}
	// The range is full: a fourth user is refused, not given a used uid.
	if _, err := n.Prepare(home("dave"), ""); err == nil {
		t.Errorf("a fourth user in a range of three got a uid")
	}
	// A restart keeps every uid.
	n2 := newTestNode(t, Options{Homes: homes, UIDs: r})
	for _, u := range []string{"bob", "alice", "old"} {
		l, err := n2.Prepare(home(u), "")
		if err != nil || l.Credential.Uid != got[u] {
			t.Errorf("%s after a restart: %+v, %v; want uid %d", u, l.Credential, err, got[u])
		}
	}
	// Two homes owned by one uid: neither is served under it.
	if err := os.Lchown(home("dave"), int(got["alice"]), int(got["alice"])); err != nil {
		t.Fatal(err)
	}
	n3 := newTestNode(t, Options{Homes: homes, UIDs: r})
	for _, u := range []string{"alice", "dave"} {
		if _, err := n3.Prepare(home(u), ""); err == nil {
			t.Errorf("%s: served under a uid that owns two homes", u)
		}
	}
}

// TestSharedRefusesSecondUser: with neither a uid switch nor bubblewrap,
// the first user is served and another refused, unless AllowShared; a
// second user's folder without a home (a stored key) does not lock the
// first out, and a restart keeps serving the first.
func TestSharedRefusesSecondUser(t *testing.T) {
	for _, allow := range []bool{false, true} {
		homes := t.TempDir()
		home := func(u string) string { return filepath.Join(homes, u, ".codex") }
		if err := os.MkdirAll(filepath.Join(homes, "bob", "meshweaver"), 0o700); err != nil {
			t.Fatal(err)
		}
		for run := range 2 {
			n := newTestNode(t, Options{Homes: homes, AllowShared: allow})
			if n.Mode() != "shared" || n.Warning() == "" {
				t.Errorf("mode %q warning %q", n.Mode(), n.Warning())
			}
			l, err := n.Prepare(home("alice"), "")
			if err != nil {
				t.Errorf("allow=%v run %d: first user: %v", allow, run, err)
			}
			if !slices.Contains(l.Env, "HOME="+home("alice")) {
				t.Errorf("shared mode: env %q, want HOME=%s (not the daemon's)", l.Env, home("alice"))
			}
			if err := os.MkdirAll(home("alice"), 0o700); err != nil { // the start makes it
				t.Fatal(err)
			}
			_, err = n.Prepare(home("bob"), "")
			if allow != (err == nil) || (!allow && !errors.Is(err, ErrShared)) {
				t.Errorf("allow=%v run %d: second user: %v", allow, run, err)
			}
		}
	}
}

// TestBwrapArgs: the sandbox binds this home alone over an empty homes
// root, the workspace read-only unless writable, masks hidden files, and
// starts nothing but the CLI after "--".
func TestBwrapArgs(t *testing.T) {
	homes := t.TempDir()
	secret := filepath.Join(t.TempDir(), "tls.key")
	if err := os.WriteFile(secret, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, writable := range []bool{false, true} {
		n := newTestNode(t, Options{Homes: homes, Workspace: "/srv/ws", WorkspaceWritable: writable, Bwrap: "/usr/bin/bwrap", Hide: []string{secret}})
		home := filepath.Join(homes, "alice", ".codex")
		l, err := n.Prepare(home, "/opt/codex/vendor/bin/codex")
		if err != nil {
			t.Fatal(err)
		}
		a := strings.Join(l.Wrapper, " ")
		want := []string{
			"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--proc /proc",
			"--tmpfs " + homes + " --bind " + home + " " + home,
			"--ro-bind /opt/codex/vendor /opt/codex/vendor",
			"--ro-bind /dev/null " + secret,
			"--chdir /srv/ws",
		}
		if writable {
			want = append(want, "--bind /srv/ws /srv/ws")
		} else {
			want = append(want, "--ro-bind /srv/ws /srv/ws")
		}
		for _, w := range want {
			if !strings.Contains(a, w) {
				t.Errorf("writable=%v: bwrap args lack %q: %s", writable, w, a)
			}
		}
		if l.Wrapper[0] != "/usr/bin/bwrap" || l.Wrapper[len(l.Wrapper)-1] != "--" || strings.Contains(a, " /etc /etc") {
			t.Errorf("bwrap args: %s", a)
		}
		// The homes root comes after every other bind, so a bound folder
		// that holds it cannot bring the other homes back.
		if i, j := strings.Index(a, "--tmpfs "+homes+" "), strings.Index(a, " /srv/ws /srv/ws"); i < j {
			t.Errorf("the homes tmpfs precedes the workspace bind: %s", a)
		}
		if strings.Contains(a, "--unshare-user") {
			t.Errorf("a user namespace without Root: %s", a)
		}
	}
	// A root daemon without a uid switch: root's capabilities stay in the
	// sandbox's own user namespace; with a uid switch they are gone anyway.
	for _, uids := range []Range{{}, {Lo: 300000, Hi: 300100}} {
		n := newTestNode(t, Options{Homes: homes, Bwrap: "/usr/bin/bwrap", Root: true, UIDs: uids})
		l, err := n.Prepare(filepath.Join(homes, "carol", ".codex"), "")
		if err != nil && uids.Empty() {
			t.Fatal(err)
		}
		if got, want := slices.Contains(l.Wrapper, "--unshare-user"), uids.Empty(); err == nil && got != want {
			t.Errorf("root, uids %v: --unshare-user %v, want %v", uids, got, want)
		}
	}
}
