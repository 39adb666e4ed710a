package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

var hostileUserIDs = []string{
	"",
	".",
	"..",
	"../x",
	"..\\x",
	"/abs",
	"a/b",
	"a\x00b",
	"\x00",
	strings.Repeat("x", 10_000),
	strings.Repeat("a", MaxUserIDLen+1),
	"ü",
	"日本語",
	"a b",
	"a\nb",
	"-rf",
	".hidden",
	"~",
	"$HOME",
	"a:b",
	"a*",
	"\xff\xfe",
}

func TestValidateUserID(t *testing.T) {
	valid := []string{"a", "alice", "Alice.Smith", "a_b", "a-b", "user@example.com", "0", "a..b", "a.", strings.Repeat("a", MaxUserIDLen)}
	for _, id := range valid {
		if err := ValidateUserID(id); err != nil {
			t.Errorf("ValidateUserID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range hostileUserIDs {
		err := ValidateUserID(id)
		if !errors.Is(err, ErrInvalidUserID) {
			t.Errorf("ValidateUserID(%q) = %v, want ErrInvalidUserID", quoteClip(id), err)
			continue
		}
		msg := err.Error()
		if len(msg) > 200 {
			t.Errorf("error for %s is %d bytes long", quoteClip(id), len(msg))
		}
		if strings.ContainsAny(msg, "\x00\n") {
			t.Errorf("error %q holds raw control characters", msg)
		}
		if len(id) > 64 && strings.Contains(msg, id[:64]) {
			t.Errorf("error %q echoes the long input", msg)
		}
	}
}

func TestHomeDir(t *testing.T) {
	tests := []struct {
		root, user string
		want       string
		wantErr    bool
	}{
		{root: "/srv/homes", user: "alice", want: "/srv/homes/alice/.codex"},
		{root: "/srv/homes/", user: "bob@example.com", want: "/srv/homes/bob@example.com/.codex"},
		{root: "/srv//homes/../homes", user: "c", want: "/srv/homes/c/.codex"},
		{root: "/", user: "d", want: "/d/.codex"},
		{root: "relative/homes", user: "alice", wantErr: true},
		{root: "", user: "alice", wantErr: true},
	}
	for _, id := range hostileUserIDs {
		tests = append(tests, struct {
			root, user string
			want       string
			wantErr    bool
		}{root: "/srv/homes", user: id, wantErr: true})
	}
	for _, tt := range tests {
		got, err := HomeDir(tt.root, tt.user)
		if tt.wantErr {
			if err == nil {
				t.Errorf("HomeDir(%q, %s) = %q, want an error", tt.root, quoteClip(tt.user), got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("HomeDir(%q, %q) = %q, %v; want %q", tt.root, tt.user, got, err, tt.want)
		}
		root := filepath.Clean(tt.root)
		if !filepath.IsAbs(got) || !strings.HasPrefix(got, strings.TrimSuffix(root, "/")+"/") {
			t.Errorf("HomeDir(%q, %q) = %q is not absolute under the root", tt.root, tt.user, got)
		}
	}
}

func TestUserDir(t *testing.T) {
	got, err := UserDir("/srv/homes", "alice")
	if err != nil || got != "/srv/homes/alice" {
		t.Errorf("UserDir = %q, %v; want /srv/homes/alice", got, err)
	}
	if _, err := UserDir("/srv/homes", "../etc"); !errors.Is(err, ErrInvalidUserID) {
		t.Errorf("UserDir(../etc) error = %v, want ErrInvalidUserID", err)
	}
}
