package contain

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// quotaHomes is a folder for homes on a filesystem that enforces project
// quotas: an ext4 image the test makes and mounts (removed after), or,
// where this kernel has no quota support, the test is skipped saying so.
// MESHWEAVER_PRJQUOTA_DIR names such a folder made elsewhere (the
// scripts/quota-uml run).
func quotaHomes(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("MESHWEAVER_PRJQUOTA_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "homes")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	if os.Geteuid() != 0 {
		t.Skip("project quotas need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	// A user's uid writes in it: the test's folders (0700) let it pass.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	qfs, err := MakeQuotaFS(ctx, filepath.Join(dir, "quota.img"), filepath.Join(dir, "mnt"), 64<<20)
	if err != nil {
		t.Skipf("no project quotas on this host: %v", err)
	}
	t.Cleanup(func() {
		if err := qfs.Close(); err != nil {
			t.Error(err)
		}
	})
	return qfs.Dir
}

// asNobody runs argv as uid 65534 (a user's uid: root's CAP_SYS_RESOURCE
// passes a quota's hard limit).
func asNobody(argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestProjectQuotaBoundsAHome: a home given its user's project holds no
// more than the limit (a 64 MiB write into a 16 MiB home stops at the
// quota, EDQUOT), the project id is recorded outside the home and is not
// 0, the daemon's folder of the user beside the home is outside the
// project (it still takes writes), a file cannot be renamed out of the
// project (EXDEV), and a new size applies to the live home.
func TestProjectQuotaBoundsAHome(t *testing.T) {
	homes := quotaHomes(t)
	const size = 16 << 20
	q, err := OpenQuota(homes, size)
	if err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(homes, "alice")
	home := filepath.Join(user, ".codex")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// What the home held before quotas were in force joins the project.
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("model = \"m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := q.Bound(home); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(user, "meshweaver", ProjIDName)
	id, err := readProjID(rec)
	if err != nil || id == 0 {
		t.Fatalf("project id record: %d, %v", id, err)
	}
	for _, p := range []string{home, filepath.Join(home, "config.toml")} {
		a, err := getProject(p)
		if err != nil || a.projID != id {
			t.Errorf("project of %s = %d, %v; want %d", p, a.projID, err, id)
		}
	}
	if a, _ := getProject(filepath.Dir(rec)); a.projID != 0 {
		t.Errorf("the daemon's folder of the user is in project %d; want 0, outside the user's", a.projID)
	}
	for _, p := range []string{user, home, filepath.Dir(rec)} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}

	// The fill: 64 MiB asked, the quota stops it.
	out, err := asNobody("dd", "if=/dev/zero", "of="+filepath.Join(home, "fill"), "bs=1M", "count=64")
	if err == nil || !strings.Contains(out, "quota") {
		t.Errorf("dd of 64MiB into a 16MiB home: %v, %s; want a quota's refusal", err, out)
	}
	u, ok := q.Usage(home)
	if !ok || u.Size != size || u.Used > size*5/4 || u.Used < size/2 {
		t.Errorf("usage = %+v, %v; want about %d of %d", u, ok, size, size)
	}
	if !q.Full(home) {
		t.Errorf("Full = false at %+v", u)
	}
	// The daemon's records beside the home still take writes.
	if out, err := asNobody("dd", "if=/dev/zero", "of="+filepath.Join(filepath.Dir(rec), "record"), "bs=1M", "count=2"); err != nil {
		t.Errorf("a record beside the full home: %v, %s", err, out)
	}
	// A file does not leave its project by a rename: into another
	// project's folder the kernel refuses it (EXDEV), and into a folder of
	// no project it keeps its own, still counted.
	bobHome := filepath.Join(homes, "bob", ".codex")
	if err := q.Bound(bobHome); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(home, "fill"), filepath.Join(bobHome, "fill")); !errors.Is(err, unix.EXDEV) {
		t.Errorf("renaming into another user's project: %v, want EXDEV", err)
	}
	outside := filepath.Join(user, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(home, "fill"), filepath.Join(outside, "fill")); err != nil {
		t.Fatal(err)
	}
	if a, err := getProject(filepath.Join(outside, "fill")); err != nil || a.projID != id {
		t.Errorf("a file moved out of the home is in project %d, %v; want %d, still counted", a.projID, err, id)
	}
	if u2, _ := q.Usage(home); u2.Used != u.Used {
		t.Errorf("usage after the move = %d, want %d", u2.Used, u.Used)
	}
	if err := os.Rename(filepath.Join(outside, "fill"), filepath.Join(home, "fill")); err != nil {
		t.Fatal(err)
	}
	// Its owner cannot take a file out of the project from a user
	// namespace of its own, where every sandbox runs (bubblewrap started
	// as the user's uid makes one). From the host's namespace it can
	// (chattr -p 0, which ext4 and XFS allow a file's owner there), which
	// is why OpenQuota is only chosen with bubblewrap on.
	if out, err := asNobody("unshare", "--user", "--map-current-user", "chattr", "-p", "0", filepath.Join(home, "fill")); err == nil || !strings.Contains(out, "Invalid argument") {
		a, _ := getProject(filepath.Join(home, "fill"))
		t.Errorf("the file's owner, in a user namespace, set its project to %d (chattr -p 0: %s): the quota no longer counts it", a.projID, out)
	}
	if a, _ := getProject(filepath.Join(home, "fill")); a.projID != id {
		t.Errorf("the file's project is %d, want %d", a.projID, id)
	}
	// A reload's new size: one quotactl.
	if err := q.SetSize(32<<20, []string{home}); err != nil {
		t.Fatal(err)
	}
	if u, ok := q.Usage(home); !ok || u.Size != 32<<20 || q.Full(home) {
		t.Errorf("after SetSize(32MiB): %+v, %v, full %v", u, ok, q.Full(home))
	}
	// Bound again (the user's next start) keeps the id.
	if err := q.Bound(home); err != nil {
		t.Fatal(err)
	}
	if again, _ := readProjID(rec); again != id {
		t.Errorf("project id after a second Bound = %d, want %d", again, id)
	}
	// A reopened Quota knows alice's id and gives bob another.
	q2, err := OpenQuota(homes, size)
	if err != nil {
		t.Fatal(err)
	}
	if q2.ids[id] != user {
		t.Errorf("reopened ids = %v, want %d for %s", q2.ids, id, user)
	}
}

// TestProjectIDsDoNotCollide: a user whose hash gives a taken id gets the
// next free one, recorded; ids are never 0.
func TestProjectIDsDoNotCollide(t *testing.T) {
	homes := t.TempDir()
	q := &Quota{homes: homes, ids: make(map[uint32]string)}
	bob := filepath.Join(homes, "bob")
	want, err := (&Quota{ids: map[uint32]string{}}).projID(filepath.Join(t.TempDir(), "bob"))
	if err != nil {
		t.Fatal(err)
	}
	q.ids[want] = filepath.Join(homes, "carol") // carol holds bob's hash
	got, err := q.projID(bob)
	if err != nil {
		t.Fatal(err)
	}
	if got == want || got == 0 || got < projIDBase {
		t.Errorf("bob's id = %d; carol holds %d", got, want)
	}
	if rec, _ := readProjID(filepath.Join(bob, "meshweaver", ProjIDName)); rec != got {
		t.Errorf("recorded %d, want %d", rec, got)
	}
	if err := os.WriteFile(filepath.Join(bob, "meshweaver", ProjIDName), []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := q.projID(bob); err == nil {
		t.Error("a record of project 0 was accepted")
	}
}

// TestDiskChoosesItsBound: the choice order. Without user namespaces in
// the sandboxes (or where the homes' filesystem has no project quotas) a
// Disk bounds homes with images and says why not quotas; an image's size
// is not changed by a reload. With both, a Disk bounds homes with project
// quotas, and a reload's size reaches the bound homes.
func TestDiskChoosesItsBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("images and quotas need root")
	}
	homes := t.TempDir()
	d, err := OpenDiskOn(homes, 16<<20, false)
	if err != nil {
		t.Skip(err) // no mkfs.ext4 or loop devices: neither bound
	}
	if d.Kind() != "image" || d.NoQuota() == nil || !strings.Contains(d.NoQuota().Error(), "user namespaces") {
		t.Errorf("without user namespaces: %q, %v; want images and why not quotas", d.Kind(), d.NoQuota())
	}
	if err := d.SetSize(32 << 20); err == nil || d.Size() != 16<<20 {
		t.Errorf("an image's reload: %v, size %d; want refused, 16MiB kept", err, d.Size())
	}
	if none, err := OpenDiskOn(homes, 0, true); err != nil || none.Kind() != "" {
		t.Errorf("no disk limit: %q, %v", none.Kind(), err)
	}

	homes = quotaHomes(t)
	d, err = OpenDiskOn(homes, 16<<20, true)
	if err != nil || d.Kind() != "project quota" {
		t.Fatalf("on a filesystem with project quotas: %q, %v", d.Kind(), err)
	}
	home := filepath.Join(homes, "alice", ".codex")
	if err := d.Mount(context.Background(), home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if ok, _ := isMountpoint(home); ok {
		t.Error("a home bounded by a quota was mounted")
	}
	if err := d.SetSize(24 << 20); err != nil {
		t.Fatal(err)
	}
	if u, ok := d.Usage(home); !ok || u.Size != 24<<20 {
		t.Errorf("after a reload to 24MiB: %+v, %v", u, ok)
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}
