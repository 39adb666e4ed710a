package isolate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ProbePrefix starts the name of a probe's folder under the homes. User
// ids never start with a dot, so no user's home can be taken for it, and
// the homes' scan passes over it.
const ProbePrefix = ".probe-"

// Probe says how to start an app-server in home the way Prepare starts a
// user's, for a check that must see what a round would see: the same
// sandbox, the CLI where the users' uids run it, and (when uids are
// switched) a uid of the range. That uid is the range's highest and is
// neither claimed nor recorded: the probe holds it only while it runs.
// home is Homes/<ProbePrefix…>/.codex, or the same under the deepest
// folder of Homes that exists when Homes is not made yet; Probe creates
// it and gives it to the uid. The caller removes its folder afterwards.
func (n *Node) Probe(home, codexBin string) (Launch, error) {
	home = filepath.Clean(home)
	userDir := filepath.Dir(home)
	if !strings.HasPrefix(filepath.Base(userDir), ProbePrefix) || filepath.Base(home) != ".codex" {
		return Launch{}, fmt.Errorf("probing in %s: not a probe's home", home)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return Launch{}, fmt.Errorf("probing in %s: %w", home, err)
	}
	var l Launch
	if !n.opts.UIDs.Empty() {
		uid := n.opts.UIDs.Hi
		// The folders as uidFor leaves a user's: passable, not listable.
		if err := os.Chmod(userDir, PassMode); err != nil {
			return Launch{}, fmt.Errorf("probing in %s: %w", home, err)
		}
		if err := os.Chown(home, int(uid), int(uid)); err != nil {
			return Launch{}, fmt.Errorf("probing in %s: %w", home, err)
		}
		l.Credential = &syscall.Credential{Uid: uid, Gid: uid}
		if codexBin != "" {
			n.mu.Lock()
			bin, err := n.cliFor(codexBin)
			n.mu.Unlock()
			if err != nil {
				return Launch{}, fmt.Errorf("probing in %s: %w", home, err)
			}
			codexBin = bin
		}
	}
	l.Env = append(l.Env, "HOME="+home, "TMPDIR=/var/tmp")
	l.Binary = codexBin
	if n.opts.Bwrap != "" {
		l.Wrapper = n.bwrapArgs(home, codexBin)
	}
	return l, nil
}
