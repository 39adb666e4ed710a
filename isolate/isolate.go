package isolate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Options is what a Node separates users with, chosen by Detect or given
// by a test.
type Options struct {
	// Homes is the root of the users' folders; a user's CODEX_HOME is
	// Homes/<user>/.codex, and Homes/<user>/meshweaver is the daemon's.
	Homes string
	// Workspace is the shared workspace, bound read-only unless
	// WorkspaceWritable.
	Workspace         string
	WorkspaceWritable bool
	// UIDs is the range each user's uid comes from; the zero Range means no
	// uid switching (every app-server runs as the daemon's user).
	UIDs Range
	// Bwrap is the bubblewrap binary; empty means no mount, pid and IPC
	// namespaces.
	Bwrap string
	// ReadOnly lists more paths bound read-only into every sandbox (a
	// model catalog, a CA bundle). The codex binary's folder always is.
	ReadOnly []string
	// Hide lists the daemon's own files (TLS keys) masked inside every
	// sandbox even where a bound folder holds them.
	Hide []string
	// AllowShared accepts more than one user when neither a uid switch
	// nor bubblewrap separates them.
	AllowShared bool
	// HostClaims is the folder every daemon of this host claims its users'
	// uids in (DefaultHostClaims in serve; hostclaims.go): one user folder,
	// one uid, on the whole host, and a new user never gets a uid that
	// something outside the daemon's homes uses. "": no host claims (a
	// test's node, alone on its homes).
	HostClaims string
	// InUse, when set, replaces the check of the uids used outside the
	// daemon's homes (uidsInUse), which runs only with HostClaims.
	InUse func() map[uint32]bool
	// CLILinks is a folder of the daemon's (only it may write there) where
	// the CLI's folder is linked when the users' uids cannot reach it where
	// it is installed (default DefaultCLILinks).
	CLILinks string
	// Root says the daemon runs as root. Without a uid switch its
	// sandboxes then get a user namespace of their own (--unshare-user):
	// run as plain root they kept root's capabilities on the host, and with
	// CAP_DAC_READ_SEARCH a file of another home opened by handle.
	Root bool
}

// Range is an inclusive range of uids; the zero value is empty.
type Range struct{ Lo, Hi uint32 }

// Empty reports a range with no uid.
func (r Range) Empty() bool { return r.Hi == 0 || r.Hi < r.Lo }

func (r Range) String() string {
	if r.Empty() {
		return "off"
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

func (r Range) has(uid uint32) bool { return !r.Empty() && uid >= r.Lo && uid <= r.Hi }

// ParseRange reads "LO-HI" (inclusive); "off" or "" is the empty Range.
// Uid 0 and ranges above 2^31 are refused.
func ParseRange(s string) (Range, error) {
	if s == "" || s == "off" {
		return Range{}, nil
	}
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(lo, 10, 32)
	b, err2 := strconv.ParseUint(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil || a == 0 || b < a || b >= 1<<31 {
		return Range{}, fmt.Errorf("uid range %q is not LO-HI with 0 < LO <= HI < 2^31", s)
	}
	return Range{Lo: uint32(a), Hi: uint32(b)}, nil
}

// Node separates the users of one daemon. It is the daemon's only owner of
// uid allocation and of the ownership and modes of the homes: Prepare is
// safe for concurrent use, one user at a time. Daemons sharing the homes
// (a cluster) agree on uids through the claim files (see claim).
type Node struct {
	opts Options

	mu     sync.Mutex
	owners map[uint32]string // uid → user folder, once the homes were scanned
	sole   string            // in shared mode, the one user folder served
	cli    map[string]string // CLI as given → the path the users' uids run it at
}

// New returns a Node for opts; relative paths are made absolute.
func New(opts Options) (*Node, error) {
	var err error
	if opts.Homes, err = filepath.Abs(opts.Homes); err != nil {
		return nil, err
	}
	if opts.Workspace != "" {
		if opts.Workspace, err = filepath.Abs(opts.Workspace); err != nil {
			return nil, err
		}
	}
	return &Node{opts: opts, cli: map[string]string{}}, nil
}

// UIDs is the range the users' app-servers run as; empty when the node
// does not switch uids (every app-server runs as the daemon's uid).
func (n *Node) UIDs() Range { return n.opts.UIDs }

// Has reports whether uid is in the range.
func (r Range) Has(uid uint32) bool { return r.has(uid) }

// Mode names what separates users: "uid+bwrap", "uid", "bwrap" or
// "shared" (nothing: one uid, one view of the files).
func (n *Node) Mode() string {
	switch uid, bw := !n.opts.UIDs.Empty(), n.opts.Bwrap != ""; {
	case uid && bw:
		return "uid+bwrap"
	case uid:
		return "uid"
	case bw:
		return "bwrap"
	}
	return "shared"
}

// Warning is what the operator must know about this node's separation, or
// "" when users are separated.
func (n *Node) Warning() string {
	if n.Mode() != "shared" {
		return ""
	}
	if n.opts.AllowShared {
		return "users are not separated: every app-server runs as the daemon's uid and sees every home (--allow-shared-uid)"
	}
	return "users are not separated (no uid switch, no bubblewrap): only one user is served; --allow-shared-uid accepts more"
}

// ErrShared is returned by Prepare for a second user on a node that cannot
// separate users and was not told to accept that.
var ErrShared = errors.New("this node cannot separate users (no uid switch, no bubblewrap) and another user already has a home here; --allow-shared-uid accepts that")

// Launch is how one user's app-server is started.
type Launch struct {
	// Wrapper is the bubblewrap command line the CLI runs under, ending in
	// "--"; nil without bubblewrap.
	Wrapper []string
	// Credential is the user's uid and gid; nil without uid switching.
	Credential *syscall.Credential
	// Env holds KEY=VALUE pairs that replace the daemon's (HOME, TMPDIR).
	Env []string
	// Binary is the CLI to run: the one given, or its link where the
	// user's uid can reach it.
	Binary string
}

// Prepare readies home (Homes/<user>/.codex) for its app-server and says
// how to start it: it allocates the user's uid (first time) and gives the
// home to it, 0700, with the folders above it searchable but not listable;
// it builds the bubblewrap command line. codexBin is the CLI, whose folder
// is bound read-only.
func (n *Node) Prepare(home, codexBin string) (Launch, error) {
	home = filepath.Clean(home)
	userDir := filepath.Dir(home)
	if filepath.Dir(userDir) != n.opts.Homes || filepath.Base(home) != ".codex" {
		return Launch{}, fmt.Errorf("isolating %s: not a home under %s", home, n.opts.Homes)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var l Launch
	switch n.Mode() {
	case "shared":
		if !n.opts.AllowShared {
			if err := n.soleUser(userDir); err != nil {
				return Launch{}, err
			}
		}
		// HOME as below: a login shell must not read the daemon's profile.
		l.Env = append(l.Env, "HOME="+home)
		return l, nil
	case "uid", "uid+bwrap":
		uid, err := n.uidFor(userDir, home)
		if err != nil {
			return Launch{}, fmt.Errorf("isolating %s: %w", home, err)
		}
		l.Credential = &syscall.Credential{Uid: uid, Gid: uid}
		if codexBin != "" {
			if codexBin, err = n.cliFor(codexBin); err != nil {
				return Launch{}, fmt.Errorf("isolating %s: %w", home, err)
			}
		}
	default:
		if err := os.MkdirAll(home, 0o700); err != nil {
			return Launch{}, fmt.Errorf("isolating %s: %w", home, err)
		}
	}
	// The user's own home is their HOME: the daemon's is not theirs to
	// read, and a login shell finds no profile of anyone else's there.
	// TMPDIR is /var/tmp (an empty tmpfs of its own under bubblewrap): the
	// CLI refuses to make its helper links (codex-linux-sandbox, which its
	// own sandbox execs) in a CODEX_HOME under TMPDIR, and without them
	// that sandbox cannot start where homes live under /tmp (tests).
	l.Env = append(l.Env, "HOME="+home, "TMPDIR=/var/tmp")
	l.Binary = codexBin
	if n.opts.Bwrap != "" {
		l.Wrapper = n.bwrapArgs(home, codexBin)
	}
	return l, nil
}

// soleUser refuses userDir unless it is the one user this shared node
// serves: the user whose home (a CODEX_HOME, made only by a start) is
// under Homes, or, when there is none yet, the first to start. A folder a
// second user got by other means (a stored key) does not count, so a
// second user cannot lock the first out. Homes of several users (left by
// an earlier run with --allow-shared-uid or with separation) refuse all.
func (n *Node) soleUser(userDir string) error {
	if n.sole == "" {
		entries, err := os.ReadDir(n.opts.Homes)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("listing %s: %w", n.opts.Homes, err)
		}
		var served []string
		for _, e := range entries {
			dir := filepath.Join(n.opts.Homes, e.Name())
			if fi, err := os.Lstat(filepath.Join(dir, ".codex")); err == nil && fi.IsDir() {
				served = append(served, dir)
			}
		}
		switch len(served) {
		case 0:
			n.sole = userDir
		case 1:
			n.sole = served[0]
		default:
			return ErrShared
		}
	}
	if n.sole != userDir {
		return ErrShared
	}
	return nil
}

// uidFor returns the user's uid, allocating it the first time: the home's
// owner is the persistent record, so a uid in the range that owns a home
// belongs to that home's user and to nobody else. It creates the folders
// with their modes and gives the home (and, when it changed hands, all it
// holds) to the uid.
func (n *Node) uidFor(userDir, home string) (uint32, error) {
	if err := n.scan(); err != nil {
		return 0, err
	}
	// The homes root and the user's folder belong to the daemon: the
	// user's uid may pass through them (bubblewrap binds the home as that
	// uid) but not list them; Homes/<user>/meshweaver stays 0700.
	for _, d := range []string{n.opts.Homes, userDir} {
		if err := os.MkdirAll(d, PassMode); err != nil {
			return 0, err
		}
		if err := os.Chmod(d, PassMode); err != nil {
			return 0, err
		}
	}
	if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return 0, err
	}
	fi, err := os.Lstat(home)
	if err != nil {
		return 0, err
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("%s is not a directory", home)
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	uid := owner
	if n.opts.UIDs.has(owner) {
		if err := n.ownHome(owner, userDir); err != nil {
			return 0, err
		}
	} else {
		if uid, err = n.allocate(userDir); err != nil {
			return 0, err
		}
		// Another member may have given the home a uid meanwhile: that
		// uid is the user's if its claim names them (the one just
		// claimed stays claimed: a uid is never reused silently).
		if fi, err = os.Lstat(home); err != nil {
			return 0, err
		}
		if now := fi.Sys().(*syscall.Stat_t).Uid; now != owner && n.opts.UIDs.has(now) {
			if err := n.ownHome(now, userDir); err != nil {
				return 0, err
			}
			owner, uid = now, now
		}
	}
	if err := os.Chmod(home, 0o700); err != nil {
		return 0, err
	}
	if owner != uid {
		// The home changes hands: everything in it goes to the user. No
		// symlink is followed (Lchown), and nothing outside is touched.
		err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(uid), int(uid))
		})
		if err != nil {
			return 0, fmt.Errorf("giving the home to uid %d: %w", uid, err)
		}
	}
	n.owners[uid] = userDir
	return uid, nil
}

// scan records, once, which uid of the range owns which home.
func (n *Node) scan() error {
	if n.owners != nil {
		return nil
	}
	owners := make(map[uint32]string)
	entries, err := os.ReadDir(n.opts.Homes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing %s: %w", n.opts.Homes, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") { // the claims, a probe's folder: nobody's home
			continue
		}
		dir := filepath.Join(n.opts.Homes, e.Name())
		fi, err := os.Lstat(filepath.Join(dir, ".codex"))
		if err != nil || !fi.IsDir() {
			continue
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		if !n.opts.UIDs.has(uid) {
			continue
		}
		if _, dup := owners[uid]; dup {
			// Neither may use it; both get an error from uidFor.
			owners[uid] = ""
			continue
		}
		owners[uid] = dir
	}
	// Every home's uid gets its claim, so that no member allocates it to
	// a new user. A claim naming another user refuses the uid for this
	// home (uidFor says why); a claim that cannot be read is reported
	// when its home's user starts.
	for uid, dir := range owners {
		if dir == "" {
			continue
		}
		if err := n.claim(uid, dir); errors.Is(err, errClaimed) {
			owners[uid] = ""
		}
	}
	n.owners = owners
	return nil
}

// ownHome checks that uid, which owns userDir's home, is that user's: no
// other home this node scanned has it, and its claim names the user (a
// claim is written when there is none).
func (n *Node) ownHome(uid uint32, userDir string) error {
	err := n.claim(uid, userDir)
	if errors.Is(err, errClaimed) {
		return fmt.Errorf("uid %d owns another home too (%w); give one of them a uid of its own by hand", uid, err)
	}
	if err != nil {
		return err
	}
	if dir, seen := n.owners[uid]; seen && dir != userDir {
		// Two homes owned by one uid: never serve the second under it.
		return fmt.Errorf("uid %d owns another home too; give one of them a uid of its own by hand", uid)
	}
	return nil
}

// allocate picks a free uid of the range for userDir and claims it: the
// first one from a point that depends on the folder's name (so a user
// tends to get the same uid again on a new node) whose claim this node
// creates or finds naming this user.
func (n *Node) allocate(userDir string) (uint32, error) {
	r := n.opts.UIDs
	size := uint64(r.Hi) - uint64(r.Lo) + 1
	h := fnv.New64a()
	h.Write([]byte(filepath.Base(userDir)))
	start := h.Sum64() % size
	var inUse map[uint32]bool
	switch {
	case n.opts.InUse != nil:
		inUse = n.opts.InUse()
	case n.opts.HostClaims != "":
		inUse = uidsInUse()
	}
	for i := uint64(0); i < size; i++ {
		uid := r.Lo + uint32((start+i)%size)
		if dir, used := n.owners[uid]; used && dir != userDir {
			continue
		}
		if inUse[uid] {
			continue // a process or a file outside the homes is its
		}
		switch err := n.claim(uid, userDir); {
		case err == nil:
			return uid, nil
		case !errors.Is(err, errClaimed):
			return 0, err
		}
	}
	return 0, fmt.Errorf("every uid of %s is taken", r)
}

// claimsDir holds one claim file per uid given to a user, naming the
// user's folder: the record every member of a cluster sharing the homes
// sees at once (a home's owner is set only after its uid is claimed).
// User ids never start with a dot, so it is nobody's folder.
const claimsDir = ".uids"

// errClaimed is a uid's claim naming another user.
var errClaimed = errors.New("claimed by another user")

// claim makes uid the user folder userDir's, or reports errClaimed when
// its claim names another user, under the homes or on this host
// (hostClaim). The claim is written whole to a file of its own and then
// hard-linked into place, which fails when a claim exists (also over NFS),
// so no member ever reads a claim half written.
func (n *Node) claim(uid uint32, userDir string) error {
	created, err := n.homesClaim(uid, filepath.Base(userDir))
	if err != nil {
		return err
	}
	if err := n.hostClaim(uid, userDir); err != nil {
		if created { // the uid is another deployment's: not this user's here either
			_ = os.Remove(filepath.Join(n.opts.Homes, claimsDir, strconv.FormatUint(uint64(uid), 10)))
		}
		return err
	}
	return nil
}

// homesClaim makes uid name's under the homes; created says this call
// wrote the claim.
func (n *Node) homesClaim(uid uint32, name string) (created bool, err error) {
	dir := filepath.Join(n.opts.Homes, claimsDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("uid claims: %w", err)
	}
	path := filepath.Join(dir, strconv.FormatUint(uint64(uid), 10))
	tmp, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return false, fmt.Errorf("claiming uid %d: %w", uid, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(name + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("claiming uid %d: %w", uid, err)
	}
	holder, err := readClaim(path)
	if err != nil {
		return false, fmt.Errorf("uid %d: %w", uid, err)
	}
	if holder != name {
		return false, fmt.Errorf("uid %d: %w %q (%s)", uid, errClaimed, holder, path)
	}
	return false, nil
}

// readClaim returns the user folder a claim names.
func readClaim(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("reading claim: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > 256 {
		return "", fmt.Errorf("claim %s is not a small regular file; remove it by hand only if no home has that uid", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading claim: %w", err)
	}
	name, ok := strings.CutSuffix(string(b), "\n")
	if !ok || name == "" || strings.ContainsAny(name, "/\x00\n") || name[0] == '.' {
		return "", fmt.Errorf("claim %s does not name a user folder; remove it by hand only if no home has that uid", path)
	}
	return name, nil
}

// UserNamespaces reports whether every sandbox runs in a user namespace of
// its own: bubblewrap is on and either makes one itself (it is not setuid
// and runs as a user's uid) or is told to (the daemon is root with no uid
// switch: --unshare-user). An agent in the host's user namespace can
// change its own files' project id (FS_IOC_FSSETXATTR) and so leave a
// project quota; in its own it cannot.
func (n *Node) UserNamespaces() bool {
	if n == nil || n.opts.Bwrap == "" {
		return false
	}
	if n.opts.Root && n.opts.UIDs.Empty() {
		return true // --unshare-user
	}
	fi, err := os.Stat(n.opts.Bwrap)
	return err == nil && fi.Mode()&os.ModeSetuid == 0
}
