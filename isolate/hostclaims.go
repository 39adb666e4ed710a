package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/meshweaver/supervisor/procs"
)

// DefaultHostClaims is the folder every daemon of a host claims its
// users' uids in (serve's --uid-claims).
const DefaultHostClaims = "/var/lib/meshweaver/uids"

// Uids unique per host. The claims under Homes (claim) keep the daemons
// that share those homes (a cluster) to one uid per user; two daemons of
// one host with homes of their own would each give "alice" the same uid,
// and alice's agent on one would read what alice wrote on the other (and
// bob's agent a home that another deployment's alice owns). So each uid
// is also claimed in a folder all daemons of the host share
// (Options.HostClaims), by the absolute path of the user's folder: one
// path, one uid, on the whole host. The claim is made the same way (a
// file of its own, then a hard link into place, which fails when a claim
// exists), so no lock is needed and no daemon ever reads half a claim. A
// host claim whose user folder is gone while its homes root is there (a
// deployment removed) is stale and is taken over; one whose homes root is
// missing (a file system not mounted) is kept. A new user is never given
// a uid that something outside the daemon's homes uses: a process runs
// as it, a file in /tmp or /dev/shm is its, or /etc/passwd names it.

// hostClaim makes uid the user folder dir's on this host, or reports
// errClaimed when another folder holds it.
func (n *Node) hostClaim(uid uint32, dir string) error {
	if n.opts.HostClaims == "" {
		return nil
	}
	root := n.opts.HostClaims
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("host uid claims: %w", err)
	}
	path := filepath.Join(root, strconv.FormatUint(uint64(uid), 10))
	for attempt := 0; attempt < 2; attempt++ {
		err := linkClaim(root, path, dir)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("claiming uid %d on this host: %w", uid, err)
		}
		holder, err := readHostClaim(path)
		if err != nil {
			return fmt.Errorf("uid %d: %w", uid, err)
		}
		if holder == dir {
			return nil
		}
		if !staleHolder(holder) {
			return fmt.Errorf("uid %d: %w %s on this host (%s)", uid, errClaimed, holder, path)
		}
		// A removed deployment's: taken over (once; a race with another
		// daemon taking it too is settled by the link).
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("uid %d: removing the stale host claim: %w", uid, err)
		}
	}
	return fmt.Errorf("uid %d: %w on this host (%s)", uid, errClaimed, path)
}

// linkClaim writes text to a file of its own in dir and links it at path.
func linkClaim(dir, path, text string) error {
	tmp, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(text + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// readHostClaim returns the user folder a host claim names.
func readHostClaim(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("reading host claim: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return "", fmt.Errorf("host claim %s is not a small regular file; remove it by hand only if no home has that uid", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading host claim: %w", err)
	}
	dir, ok := strings.CutSuffix(string(b), "\n")
	if !ok || !filepath.IsAbs(dir) || strings.ContainsAny(dir, "\x00\n") || filepath.Clean(dir) != dir {
		return "", fmt.Errorf("host claim %s does not name a user folder; remove it by hand only if no home has that uid", path)
	}
	return dir, nil
}

// staleHolder reports whether a host claim's user folder is gone while
// the homes root above it is there.
func staleHolder(dir string) bool {
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	fi, err := os.Stat(filepath.Dir(dir))
	return err == nil && fi.IsDir()
}

// uidsInUse are the uids something outside the daemon's homes uses now:
// a process's (real or effective), an entry of /tmp's or /dev/shm's, or
// one /etc/passwd names. Unreadable sources are skipped.
func uidsInUse() map[uint32]bool {
	used := map[uint32]bool{}
	procs.Host().Scan(func(p procs.Proc) bool {
		if uid, err := p.UID(); err == nil && uid >= 0 {
			used[uint32(uid)] = true
		}
		return false
	})
	for _, dir := range []string{"/tmp", "/dev/shm", "/var/tmp"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					used[st.Uid] = true
				}
			}
		}
	}
	if f, err := os.Open("/etc/passwd"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 {
				if uid, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
					used[uint32(uid)] = true
				}
			}
		}
		f.Close()
	}
	return used
}
