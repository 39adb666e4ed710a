package isolate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultCLILinks is where a node links the CLI when the users' uids
// cannot reach it where it is installed (Options.CLILinks).
const DefaultCLILinks = "/var/lib/meshweaver/codex-cli"

// Unreachable returns the first folder on path's way (path included when
// it is a folder) that a user's uid cannot search, and "" when every one
// can. A user's uid is never a folder's owner nor in its group (its gid is
// its uid and it has no other groups), so only the bits for others count.
func Unreachable(path string) (string, error) {
	dir, fi, err := Existing(path) // a path not made yet: what is made of it
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		fi, err := os.Stat(chain[i])
		if err != nil {
			return "", err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return chain[i], nil
		}
	}
	return "", nil
}

// Existing is path made absolute when it exists, else the deepest of its
// parents that does, with what os.Stat says of it.
func Existing(path string) (string, fs.FileInfo, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	for {
		fi, err := os.Stat(path)
		if err == nil {
			return path, fi, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || path == filepath.Dir(path) {
			return "", nil, err
		}
		path = filepath.Dir(path)
	}
}

// cliFolder is the folder of the CLI's files: an npm vendor folder keeps
// the CLI's helpers (rg, its own bwrap) beside bin/, so a binary in bin/
// brings its parent.
func cliFolder(codexBin string) string {
	dir := filepath.Dir(codexBin)
	if filepath.Base(dir) == "bin" {
		dir = filepath.Dir(dir)
	}
	return dir
}

// cliFor is LinkCLI into Options.CLILinks, once per CLI. Call it with
// n.mu held.
func (n *Node) cliFor(codexBin string) (string, error) {
	if p, ok := n.cli[codexBin]; ok {
		return p, nil
	}
	links := n.opts.CLILinks
	if links == "" {
		links = DefaultCLILinks
	}
	p, err := LinkCLI(codexBin, links)
	if err != nil {
		return "", err
	}
	n.cli[codexBin] = p
	return p, nil
}

// LinkCLI is the path the users' app-servers run the CLI at: codexBin
// when their uids can reach it, else the same file in a copy of its
// folder under links, made once per CLI build (hard links where the file
// system allows, else copies). A project cloned into a private folder
// (root's home, a mktemp -d) holds its CLI where no user uid can follow,
// and bubblewrap, running as the user's uid, could not bind it.
func LinkCLI(codexBin, links string) (string, error) {
	blocked, err := Unreachable(codexBin)
	if err != nil {
		return "", fmt.Errorf("the codex CLI %s: %w", codexBin, err)
	}
	if blocked == "" {
		if fi, err := os.Stat(codexBin); err == nil && fi.Mode().Perm()&0o005 == 0o005 {
			return codexBin, nil
		}
	}
	src := cliFolder(codexBin)
	rel, err := filepath.Rel(src, codexBin)
	if err != nil {
		return "", err
	}
	key, err := cliKey(src, codexBin)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(links, key)
	bin := filepath.Join(dst, rel)
	if _, err := os.Stat(bin); err != nil {
		if err := secureDir(links); err != nil {
			return "", fmt.Errorf("the codex CLI %s is out of the users' reach (%s is not searchable by them) and cannot be linked into %s: %w", codexBin, blocked, links, err)
		}
		tmp, err := os.MkdirTemp(links, ".tmp-")
		if err != nil {
			return "", err
		}
		if err := linkTree(src, tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return "", fmt.Errorf("linking the codex CLI %s into %s: %w", src, links, err)
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			_ = os.RemoveAll(tmp)
			return "", err
		}
		if err := os.Rename(tmp, dst); err != nil {
			_ = os.RemoveAll(tmp)
			if _, serr := os.Stat(bin); serr != nil { // not another daemon's copy made meanwhile
				return "", fmt.Errorf("linking the codex CLI into %s: %w", dst, err)
			}
		}
	}
	if b, err := Unreachable(bin); err != nil || b != "" {
		return "", fmt.Errorf("the codex CLI's link %s is out of the users' reach too (%s); choose another place for it", bin, b)
	}
	return bin, nil
}

// cliKey names one build of the CLI: its folder's path and the binary's
// size, modification time and inode (an npm install writes new files).
func cliKey(src, bin string) (string, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d", src, fi.Size(), fi.ModTime().UnixNano(), ino))
	return hex.EncodeToString(sum[:8]), nil
}

// secureDir makes dir (0755) and checks that only its owner, this
// process's user, can write to it or to the folder above it: the users'
// app-servers run what it holds.
func secureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner to check", d)
		}
		owner := int(st.Uid) == os.Geteuid() || (d != dir && st.Uid == 0)
		// Above dir, a sticky folder (/tmp) lets nobody else move dir.
		others := fi.Mode().Perm()&0o022 != 0 && !(d != dir && fi.Mode()&os.ModeSticky != 0)
		if !owner {
			return fmt.Errorf("%s is owned by uid %d, not this daemon's", d, st.Uid)
		}
		if others {
			return fmt.Errorf("%s is writable by others (mode %v)", d, fi.Mode().Perm())
		}
	}
	return nil
}

// linkTree copies the tree at src into dst (which exists): folders made
// 0755, files hard-linked (copied across file systems), symlinks kept.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		if strings.HasPrefix(rel, "..") {
			return fmt.Errorf("%s escapes %s", p, src)
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			need := os.FileMode(0o004) // others read it, and run it where anyone may
			if fi.Mode().Perm()&0o111 != 0 {
				need |= 0o001
			}
			if fi.Mode().Perm()&need != need {
				return copyFile(p, to, fi.Mode().Perm()|need)
			}
			err = os.Link(p, to)
			if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) {
				return copyFile(p, to, fi.Mode().Perm())
			}
			return err
		}
		return nil // sockets, devices: nothing a CLI ships
	})
}

func copyFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := out.Chmod(perm); err != nil { // past the umask
		out.Close()
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
