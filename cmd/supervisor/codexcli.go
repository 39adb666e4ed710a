package main

import (
	"fmt"
	"log/slog"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
)

// codexCLI is the codex binary serve runs (as the actors resolve it) and
// the version it reports, for the start log and serve --check.
type codexCLI struct {
	bin     string
	version codexproto.Version
	err     error // the binary is missing or did not say its version
}

func findCodexCLI(explicit string) codexCLI {
	bin, err := codexproc.ResolveBinary(explicit)
	if err != nil {
		return codexCLI{bin: explicit, err: err}
	}
	v, err := codexproc.BinaryVersion(bin)
	return codexCLI{bin: bin, version: v, err: err}
}

// String is serve --check's line about the CLI.
func (c codexCLI) String() string {
	switch {
	case c.err != nil:
		return fmt.Sprintf("codex CLI: %v (the tested range is %s)", c.err, codexproto.TestedRange())
	case c.version.Tested():
		return fmt.Sprintf("codex CLI %s is %s, in the tested range (%s)", c.bin, c.version, codexproto.TestedRange())
	default:
		return fmt.Sprintf("codex CLI %s is %s, OUTSIDE the tested range (%s): it may work; see docs/PROTOCOL.md, \"Taking a new codex release\"",
			c.bin, c.version, codexproto.TestedRange())
	}
}

// log writes the start's line about the CLI: info in the tested range, a
// warning outside it or when the version is unknown. The daemon serves
// either way; each app-server's start says its own version again.
func (c codexCLI) log(log *slog.Logger) {
	switch {
	case c.err != nil:
		log.Warn("codex CLI version unknown", "codex", c.bin, "err", c.err, "tested", codexproto.TestedRange())
	case c.version.Tested():
		log.Info("codex CLI", "codex", c.bin, "version", c.version.String(), "tested", codexproto.TestedRange())
	default:
		log.Warn("codex CLI outside the tested range", "codex", c.bin, "version", c.version.String(), "tested", codexproto.TestedRange())
	}
}
