package contain

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/store"
)

// Quota bounds each user's home with a filesystem project quota, where
// the homes' filesystem enforces them (ext4 made with the quota and
// project features and mounted with prjquota; XFS mounted with
// prjquota): the home folder gets a project id of the user's own, with
// PROJINHERIT, before anything is written in it, and hard block and
// inode limits on that project. Writes go to the homes' own filesystem,
// with nothing mounted per user (compare the images of Disk).
//
// The project id is recorded in the daemon's folder of the user
// (Homes/<user>/meshweaver/projid), which the user's uid cannot write, and
// that folder is a sibling of the home, outside the project: the user's
// quota never blocks the daemon's records. A file cannot leave its
// project by a rename: ext4 and XFS refuse renames into a folder of
// another project (EXDEV).
//
// The syscalls are written here: golang.org/x/sys has neither quotactl's
// structures nor FS_IOC_FSSETXATTR, and no maintained Go module wraps
// them without cgo.
type Quota struct {
	homes  string
	size   int64
	inodes int64

	mu  sync.Mutex
	ids map[uint32]string // project id → the user folder that holds it
}

// ProjIDName is the file, in the daemon's folder of a user, that records
// the user's project id.
const ProjIDName = "projid"

// Project ids are taken from [projIDBase, projIDBase+projIDSpan): away
// from 0 (the default project, never limited) and from the small ids
// operators give by hand in /etc/projects.
const (
	projIDBase = 1 << 20
	projIDSpan = 1<<31 - projIDBase
)

// inodesFor is the inode limit of a home of size bytes: one per 4 KiB,
// what mkfs.ext4 gives an image of that size, at least 4096.
func inodesFor(size int64) int64 { return max(size/4096, 4096) }

// OpenQuota readies project quotas of size bytes on the filesystem of
// homes. The error says what the filesystem lacks for them; the caller
// then falls back to images.
func OpenQuota(homes string, size int64) (*Quota, error) {
	if size < 16<<20 {
		return nil, fmt.Errorf("--user-disk-max %s is below 16MiB, too small for a codex home", FormatSize(size))
	}
	if err := ProjectQuotas(homes); err != nil {
		return nil, err
	}
	q := &Quota{homes: homes, size: size, inodes: inodesFor(size), ids: make(map[uint32]string)}
	// The ids given before: a new user's may not be one of them.
	records, err := filepath.Glob(filepath.Join(homes, "*", "meshweaver", ProjIDName))
	if err != nil {
		return nil, err
	}
	for _, r := range records {
		if id, err := readProjID(r); err == nil {
			q.ids[id] = filepath.Dir(filepath.Dir(r))
		}
	}
	return q, nil
}

// ProjectQuotas says why the filesystem of dir does not enforce project
// quotas, or nil where it does.
func ProjectQuotas(dir string) error {
	at, _, err := isolate.Existing(dir)
	if err != nil {
		return fmt.Errorf("project quotas: %w", err)
	}
	f, err := os.Open(at)
	if err != nil {
		return fmt.Errorf("project quotas: %w", err)
	}
	defer f.Close()
	var st fsQuotaStatV
	st.Version = fsQStatVVersion1
	if err := quotactlFd(f, qcmd(qXGetQStatV, prjQuota), 0, unsafe.Pointer(&st)); err != nil {
		var fsType string
		var sfs unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &sfs) == nil {
			fsType = fsName(sfs.Type)
		}
		return fmt.Errorf("the homes' filesystem (%s) has no project quotas (%v): ext4 needs mkfs.ext4 -O quota,project and mount -o prjquota, XFS mount -o prjquota, and the kernel CONFIG_QUOTA with CONFIG_QFMT_V2 (ext4) or CONFIG_XFS_QUOTA", fsType, err)
	}
	if st.Flags&fsQuotaPdqEnfd == 0 {
		return errors.New("the homes' filesystem counts project quotas but does not enforce them: mount it with prjquota")
	}
	return nil
}

func fsName(t int64) string {
	switch t {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("type %#x", t)
}

// Size is the limit each home gets.
func (q *Quota) Size() int64 {
	if q == nil {
		return 0
	}
	return q.size
}

// Bound gives home (Homes/<user>/.codex) its user's project, with
// PROJINHERIT, and the project its limits. It is cheap once done (the
// project id is read back, the limits written again); a home that holds
// files already gets them moved into the project one by one (a home made
// before quotas were in force).
func (q *Quota) Bound(home string) error {
	id, err := q.projID(filepath.Dir(home))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("project quota: %w", err)
	}
	cur, err := getProject(home)
	if err != nil {
		return fmt.Errorf("project quota of %s: %w", home, err)
	}
	if cur.projID != id || cur.xflags&fsXFlagProjInherit == 0 {
		// Files first, the folder last: a failure half-way is redone by
		// the next start, which sees the folder not yet marked.
		err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == home || !(d.IsDir() || d.Type().IsRegular()) {
				return nil // symlinks and the like hold no blocks to count
			}
			return setProject(p, id, d.IsDir())
		})
		if err == nil {
			err = setProject(home, id, true)
		}
		if err != nil {
			return fmt.Errorf("project quota of %s: %w", home, err)
		}
	}
	q.mu.Lock()
	size, inodes := q.size, q.inodes
	q.mu.Unlock()
	return q.setLimits(home, id, size, inodes)
}

// SetSize sets a new limit on each home given (a SIGHUP's reload): one
// quotactl each.
func (q *Quota) SetSize(size int64, homes []string) error {
	q.mu.Lock()
	q.size, q.inodes = size, inodesFor(size)
	q.mu.Unlock()
	var errs []error
	for _, home := range homes {
		id, err := q.projID(filepath.Dir(home))
		if err == nil {
			err = q.setLimits(home, id, size, inodesFor(size))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (q *Quota) setLimits(home string, id uint32, size, inodes int64) error {
	f, err := os.Open(home)
	if err != nil {
		return fmt.Errorf("project quota: %w", err)
	}
	defer f.Close()
	d := ifDqblk{
		BHardLimit: uint64((size + qifDqblkSize - 1) / qifDqblkSize),
		IHardLimit: uint64(inodes),
		Valid:      qifBLimits | qifILimits,
	}
	if err := quotactlFd(f, qcmd(qSetQuota, prjQuota), id, unsafe.Pointer(&d)); err != nil {
		return fmt.Errorf("setting the project quota of %s: %w", home, err)
	}
	return nil
}

// Usage is what home's project holds against its limit; ok is false when
// home has no project of its user's.
func (q *Quota) Usage(home string) (u DiskUsage, ok bool) {
	if q == nil {
		return u, false
	}
	id, err := readProjID(filepath.Join(filepath.Dir(home), "meshweaver", ProjIDName))
	if err != nil {
		return u, false
	}
	f, err := os.Open(home)
	if err != nil {
		return u, false
	}
	defer f.Close()
	var d ifDqblk
	if err := quotactlFd(f, qcmd(qGetQuota, prjQuota), id, unsafe.Pointer(&d)); err != nil {
		return u, false
	}
	return DiskUsage{Used: int64(d.CurSpace), Size: int64(d.BHardLimit) * qifDqblkSize}, true
}

// Full reports a home whose project has (nearly) no room left: under 1
// MiB or 1% of it.
func (q *Quota) Full(home string) bool {
	u, ok := q.Usage(home)
	if !ok || u.Size == 0 {
		return false
	}
	free := u.Size - u.Used
	return free < 1<<20 || free < u.Size/100
}

// projID is the project id of the user whose folder is userDir: the one
// recorded, else a new one, recorded before it is used.
func (q *Quota) projID(userDir string) (uint32, error) {
	rec := filepath.Join(userDir, "meshweaver", ProjIDName)
	if id, err := readProjID(rec); err == nil {
		return id, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(filepath.Base(userDir)))
	id := projIDBase + h.Sum32()%projIDSpan
	for {
		if owner, taken := q.ids[id]; !taken || owner == userDir {
			break
		}
		id = projIDBase + (id-projIDBase+1)%projIDSpan // the next free one
	}
	if err := os.MkdirAll(filepath.Dir(rec), 0o700); err != nil {
		return 0, fmt.Errorf("project quota: %w", err)
	}
	if err := store.WriteFileAtomic(rec, []byte(strconv.FormatUint(uint64(id), 10)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("recording the project id: %w", err)
	}
	q.ids[id] = userDir
	return id, nil
}

func readProjID(path string) (uint32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("project id record %s: %q is not a project id", path, data)
	}
	return uint32(id), nil
}

// --- the kernel's interfaces (linux/fs.h, linux/quota.h, linux/dqblk_xfs.h) ---

// fsxattr is struct fsxattr.
type fsxattr struct {
	xflags     uint32
	extsize    uint32
	nextents   uint32
	projID     uint32
	cowextsize uint32
	pad        [8]byte
}

const (
	fsIocFsGetXattr    = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFsSetXattr    = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	fsXFlagProjInherit = 0x200
	prjQuota           = 2
	qGetQuota          = 0x800007
	qSetQuota          = 0x800008
	qXGetQStatV        = 'X'<<8 + 8
	qifDqblkSize       = 1024
	qifBLimits         = 1
	qifILimits         = 4
	fsQStatVVersion1   = 1
	fsQuotaPdqEnfd     = 1 << 5
)

// ifDqblk is struct if_dqblk.
type ifDqblk struct {
	BHardLimit uint64
	BSoftLimit uint64
	CurSpace   uint64
	IHardLimit uint64
	ISoftLimit uint64
	CurInodes  uint64
	BTime      uint64
	ITime      uint64
	Valid      uint32
	_          uint32
}

// fsQuotaStatV is struct fs_quota_statv.
type fsQuotaStatV struct {
	Version    int8
	_          uint8
	Flags      uint16
	IncoreDqs  uint32
	Files      [3]struct{ Ino, NBlks, NExtents uint64 } // user, group, project
	BTimeLimit int32
	ITimeLimit int32
	RTBTime    int32
	BWarn      uint16
	IWarn      uint16
	RTBWarn    uint16
	_          uint16
	_          uint32
	_          [7]uint64
}

func qcmd(cmd, typ uint32) uint32 { return cmd<<8 | typ&0xff }

func quotactlFd(f *os.File, cmd, id uint32, addr unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, // Linux 5.14
		f.Fd(), uintptr(cmd), uintptr(id), uintptr(addr), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getProject(path string) (fsxattr, error) {
	var a fsxattr
	f, err := os.Open(path)
	if err != nil {
		return a, err
	}
	defer f.Close()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFsGetXattr, uintptr(unsafe.Pointer(&a))); e != 0 {
		return a, fmt.Errorf("FS_IOC_FSGETXATTR %s: %w", path, e)
	}
	return a, nil
}

// setProject gives path project id, and a folder PROJINHERIT, so what is
// made in it joins the project.
func setProject(path string, id uint32, dir bool) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var a fsxattr
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFsGetXattr, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("FS_IOC_FSGETXATTR %s: %w", path, e)
	}
	a.projID = id
	if dir {
		a.xflags |= fsXFlagProjInherit
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFsSetXattr, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("FS_IOC_FSSETXATTR %s: %w", path, e)
	}
	return nil
}

// QuotaFS is an ext4 filesystem with project quotas enforced, on a loop
// image of its own: for tests and the bench, which need one on hosts
// whose homes' filesystem has none.
type QuotaFS struct {
	// Dir is where it is mounted.
	Dir string
	img string
}

// MakeQuotaFS makes a sparse ext4 image of size bytes at img (quota and
// project features), and mounts it with prjquota on mnt (made if need
// be). The error says what the host lacks (root, mkfs.ext4, loop devices,
// a kernel with quota support); nothing is left behind then.
func MakeQuotaFS(ctx context.Context, img, mnt string, size int64) (*QuotaFS, error) {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(img)
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "quota,project", "-E", "nodiscard", img).CombinedOutput(); err != nil {
		os.Remove(img)
		return nil, fmt.Errorf("mkfs.ext4 -O quota,project: %v: %.200s", err, out)
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		os.Remove(img)
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,prjquota,nosuid,nodev", img, mnt).CombinedOutput(); err != nil {
		os.Remove(img)
		return nil, fmt.Errorf("mounting an ext4 image with prjquota (the kernel needs CONFIG_QUOTA and CONFIG_QFMT_V2): %v: %.200s", err, out)
	}
	return &QuotaFS{Dir: mnt, img: img}, nil
}

// Close unmounts the filesystem (its loop device goes with it) and removes
// its image.
func (q *QuotaFS) Close() error {
	if err := unmount(q.Dir); err != nil {
		return err
	}
	return os.Remove(q.img)
}
