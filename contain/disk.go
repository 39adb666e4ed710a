package contain

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Disk bounds what each user's home holds: the home is a filesystem image
// of the user's own (ext4, sparse, of the limit's size), mounted on it
// through a loop device, so a full home is that user's ENOSPC and never
// the host's. The image lives in the daemon's folder beside the home
// (Homes/<user>/meshweaver/home.img), with the daemon's records, which
// the user's writes cannot fill. Images stay mounted while the daemon
// runs, the user's actor stopped or not (a cold round pays no mount), and
// are unmounted by Close.
//
// Where the homes' filesystem enforces project quotas and every user's
// agent runs in a user namespace of its own (which keeps it from taking
// its files out of its project), a Disk from OpenDiskOn bounds each home
// with a project quota instead (Quota): nothing mounted, and the writes
// go to the homes' own filesystem.
type Disk struct {
	size  atomic.Int64 // changed by SetSize while the actors read it
	mkfs  string
	quota *Quota // project quotas in force, or nil for images
	// noQuota says why project quotas are not in force (images are).
	noQuota error

	mu      sync.Mutex
	mounted map[string]bool // homes this Disk mounted or found mounted, or bound (quotas)
}

// OpenDiskOn readies the homes under homes to be bounded to size bytes:
// with project quotas when quotas is true (the users' agents cannot
// change their files' project) and the homes' filesystem enforces them,
// else with images. The error names what is missing for both.
func OpenDiskOn(homes string, size int64, quotas bool) (*Disk, error) {
	if size == 0 {
		return &Disk{mounted: make(map[string]bool)}, nil
	}
	noQuota := errors.New("the users' agents do not run in user namespaces of their own (bubblewrap off, or setuid), so they could take their files out of a project")
	if quotas {
		q, err := OpenQuota(homes, size)
		if err == nil {
			d := &Disk{quota: q, mounted: make(map[string]bool)}
			d.size.Store(size)
			return d, nil
		}
		noQuota = err
	}
	d, err := OpenDisk(size)
	if err != nil {
		return nil, fmt.Errorf("no project quotas (%v), and %w", noQuota, err)
	}
	d.noQuota = noQuota
	return d, nil
}

// Kind names how homes are bounded: "project quota", "image", or "" for
// not at all.
func (d *Disk) Kind() string {
	switch {
	case d == nil || d.size.Load() == 0:
		return ""
	case d.quota != nil:
		return "project quota"
	}
	return "image"
}

// NoQuota says why a Disk of images does not use project quotas.
func (d *Disk) NoQuota() error {
	if d == nil {
		return nil
	}
	return d.noQuota
}

// SetSize bounds every home bound so far, and those from now on, to size
// (a SIGHUP's reload). Only project quotas change while serving (one
// quotactl a home); an image's size, or turning the bound on or off,
// takes a restart.
func (d *Disk) SetSize(size int64) error {
	if d == nil || size == d.size.Load() {
		return nil
	}
	if d.quota == nil || size == 0 {
		return errors.New("the homes' images are resized, and the disk bound turned on or off, by a restart")
	}
	if size < 16<<20 {
		return fmt.Errorf("--user-disk-max %s is below 16MiB, too small for a codex home", FormatSize(size))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	homes := make([]string, 0, len(d.mounted))
	for h := range d.mounted {
		homes = append(homes, h)
	}
	d.size.Store(size)
	return d.quota.SetSize(size, homes)
}

// ImageName is the file, in the daemon's folder of a user, that holds the
// user's home.
const ImageName = "home.img"

// OpenDisk readies per-user images of size bytes; 0 gives a Disk that
// bounds nothing. The error names what the host lacks.
func OpenDisk(size int64) (*Disk, error) {
	d := &Disk{mounted: make(map[string]bool)}
	d.size.Store(size)
	if size == 0 {
		return d, nil
	}
	if size < 16<<20 {
		return nil, fmt.Errorf("--user-disk-max %s is below 16MiB, too small for a codex home", FormatSize(size))
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (mounting an image needs CAP_SYS_ADMIN)")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		missing = append(missing, "mkfs.ext4 (Debian: e2fsprogs)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		missing = append(missing, "mount (util-linux)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		missing = append(missing, "loop devices (/dev/loop-control; modprobe loop)")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("per-user disk images need %s", strings.Join(missing, ", "))
	}
	d.mkfs = mkfs
	return d, nil
}

// Size is the limit each home gets; 0 for none.
func (d *Disk) Size() int64 {
	if d == nil {
		return 0
	}
	return d.size.Load()
}

// imagePath is the image of home (Homes/<user>/.codex).
func imagePath(home string) string {
	return filepath.Join(filepath.Dir(home), "meshweaver", ImageName)
}

// Mount puts home on its image, making the image (owned by uid:gid) the
// first time and moving what the home already held into it. A home
// mounted already (by this daemon, or by one that was killed) is kept.
func (d *Disk) Mount(ctx context.Context, home string, uid, gid int) error {
	if d == nil || d.size.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mounted[home] {
		return nil
	}
	if d.quota != nil {
		if err := d.quota.Bound(home); err != nil {
			return err
		}
		d.mounted[home] = true
		return nil
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("home image: %w", err)
	}
	if ok, err := isMountpoint(home); err != nil {
		return err
	} else if ok {
		d.mounted[home] = true
		return nil
	}
	img := imagePath(home)
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("home image: %w", err)
	}
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		if err := d.makeImage(ctx, img, home, uid, gid); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("home image %s: %w", img, err)
	}
	if err := mount(ctx, img, home); err != nil {
		return err
	}
	d.mounted[home] = true
	// The image's root is the home: the user's, and only theirs.
	if err := os.Chown(home, uid, gid); err != nil {
		return fmt.Errorf("home image %s: %w", img, err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		return fmt.Errorf("home image %s: %w", img, err)
	}
	return nil
}

// makeImage creates img: sparse, ext4 with no reserved blocks, and moves
// what home holds into it. On any failure the image is removed and home
// keeps its files.
func (d *Disk) makeImage(ctx context.Context, img, home string, uid, gid int) (err error) {
	tmp := img + ".new"
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("home image: %w", err)
	}
	if err := f.Truncate(d.size.Load()); err != nil {
		f.Close()
		return fmt.Errorf("home image: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("home image: %w", err)
	}
	out, err := exec.CommandContext(ctx, d.mkfs, "-q", "-F", "-m", "0", "-L", "meshweaver-home",
		"-E", fmt.Sprintf("root_owner=%d:%d,nodiscard", uid, gid), tmp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("making the home image: %v: %.200s", err, out)
	}
	entries, err := os.ReadDir(home)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("home image: %w", err)
	}
	if len(entries) > 0 {
		// What the home holds moves in: copied through a mount of the
		// new image, then removed from under the home.
		mnt := img + ".mnt"
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return fmt.Errorf("home image: %w", err)
		}
		defer os.Remove(mnt)
		if err := mount(ctx, tmp, mnt); err != nil {
			return err
		}
		out, cpErr := exec.CommandContext(ctx, "cp", "-a", home+"/.", mnt+"/").CombinedOutput()
		if err := unmount(mnt); err != nil {
			return err
		}
		if cpErr != nil {
			return fmt.Errorf("moving the home into its image: %v: %.200s", cpErr, out)
		}
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("home image: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(home, e.Name())); err != nil {
			return fmt.Errorf("home image: clearing what moved into it: %w", err)
		}
	}
	return nil
}

// Unmount takes home off its image. Processes still using it are the
// caller's to end first; a busy mount is detached.
func (d *Disk) Unmount(home string) error {
	if d == nil || d.size.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mounted[home] {
		return nil
	}
	delete(d.mounted, home)
	if d.quota != nil {
		return nil // the project stays with the home
	}
	return unmount(home)
}

// Close unmounts every home this Disk mounted.
func (d *Disk) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for home := range d.mounted {
		if d.quota == nil {
			if err := unmount(home); err != nil {
				errs = append(errs, err)
			}
		}
		delete(d.mounted, home)
	}
	return errors.Join(errs...)
}

// DiskUsage is what a home holds against its bound.
type DiskUsage struct{ Used, Size int64 }

// Usage reads home's project quota or its image's filesystem; ok is false
// when home is not bounded.
func (d *Disk) Usage(home string) (u DiskUsage, ok bool) {
	if d == nil || d.size.Load() == 0 {
		return u, false
	}
	if d.quota != nil {
		return d.quota.Usage(home)
	}
	d.mu.Lock()
	mounted := d.mounted[home]
	d.mu.Unlock()
	if !mounted {
		return u, false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(home, &st); err != nil {
		return u, false
	}
	bs := int64(st.Bsize)
	return DiskUsage{Used: int64(st.Blocks-st.Bavail) * bs, Size: int64(st.Blocks) * bs}, true
}

// Full reports a home whose project or image has (nearly) no room left
// (the user's writes met EDQUOT or ENOSPC): under 1 MiB or 1% of it.
func (d *Disk) Full(home string) bool {
	u, ok := d.Usage(home)
	if !ok {
		return false
	}
	free := u.Size - u.Used
	return free < 1<<20 || free < u.Size/100
}

func mount(ctx context.Context, img, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mounting the home image on %s: %v: %.200s", dir, err, out)
	}
	return nil
}

// unmount unmounts dir, detaching it lazily when it is busy; the loop
// device goes with it (mount's autoclear).
func unmount(dir string) error {
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not mounted
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
	return nil
}

// isMountpoint reports whether dir is a mount point, from
// /proc/self/mountinfo.
func isMountpoint(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true, nil
		}
	}
	return false, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
