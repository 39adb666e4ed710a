package isolate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// realCLI is the pinned codex CLI, resolved to its native binary.
func realCLI(t *testing.T) string {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	if bin, err = codexproc.ResolveBinary(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// testNode is a Node over fresh homes, separating users with what this
// machine allows (a uid switch when root, bubblewrap when present).
func testNode(t *testing.T) (*isolate.Node, string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	homes, ws := filepath.Join(root, "homes"), filepath.Join(root, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := isolate.Options{Homes: homes, Workspace: ws}
	if os.Geteuid() == 0 {
		opts.UIDs = isolate.Range{Lo: 220000, Hi: 220999}
	}
	if _, err := os.Stat("/usr/bin/bwrap"); err == nil {
		opts.Bwrap = "/usr/bin/bwrap"
	}
	n, err := isolate.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return n, root
}

// start starts an app-server for home, isolated or not, and returns it
// once initialize is answered, with the time that took.
func start(t *testing.T, n *isolate.Node, bin, home string, isolated bool) (*codexproc.Process, time.Duration) {
	t.Helper()
	empty := filepath.Join(filepath.Dir(home), "emptyhome")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := codexproc.Config{
		Binary: bin, Home: home, Dir: filepath.Dir(home),
		Overrides: codexhome.Overrides("http://127.0.0.1:9/v1"),
		Env:       codexproc.AllowedEnv(os.Environ(), []string{"HOME=" + empty}),
		StopGrace: time.Second,
	}
	began := time.Now()
	if isolated {
		l, err := n.Prepare(home, bin)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Wrapper, cfg.Credential = l.Wrapper, l.Credential
		cfg.Env = append(cfg.Env, l.Env...) // later values win in exec
		if l.Wrapper != nil {
			cfg.Dir = "/"
		}
	}
	p, err := codexproc.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := codexproto.NewClient(p.Conn()).Initialize(ctx, codexproto.ClientInfo{Name: "coldstart", Version: "1"}); err != nil {
		_ = p.Kill(ctx)
		t.Fatalf("initialize (isolated %v): %v; stderr: %s", isolated, err, p.StderrTail())
	}
	return p, time.Since(began)
}

// TestColdStartCost measures, in one run, the cold start of an app-server
// (a fresh home; spawn, and for the isolated one the uid allocation, the
// chown and bubblewrap, until initialize is answered) with and without
// isolation, alternating, and reports the medians and their ratio. It is
// a figure, not an assertion. Every app-server is stopped (isolated ones
// half by Stop, half by Kill) and its whole tree, inside the sandbox too,
// must be gone.
func TestColdStartCost(t *testing.T) {
	bin := realCLI(t)
	n, root := testNode(t)
	const rounds = 7
	var plain, iso []time.Duration
	for i := range rounds {
		for _, isolated := range []bool{false, true} {
			home := filepath.Join(root, "homes", fmt.Sprintf("u%d-%v", i, isolated), ".codex")
			p, d := start(t, n, bin, home, isolated)
			if isolated {
				iso = append(iso, d)
			} else {
				plain = append(plain, d)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if isolated && i%2 == 1 {
				_ = p.Kill(ctx)
			} else if err := p.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
			cancel()
			// Anything of the run: the CLI, its helpers, bubblewrap itself.
			proctest.WaitGone(t, 5*time.Second, 20*time.Millisecond, proctest.UnderHome(root))
		}
	}
	mp, mi := median(plain), median(iso)
	t.Logf("cold start, spawn to initialize answered, median of %d (mode %s): plain %v, isolated %v, ratio %.2f",
		rounds, n.Mode(), mp.Round(time.Millisecond), mi.Round(time.Millisecond), float64(mi)/float64(mp))
	t.Logf("plain %v; isolated %v", plain, iso)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
