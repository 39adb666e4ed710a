package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module of its own builds against the package with no replace of
// hollywood: the patched transport is part of this module. The one replace
// below stands in for `go get` of this checkout.
func TestBuildsFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not under -short")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", `module example.com/meshcaller

go 1.26.8

require github.com/meshweaver/supervisor v0.0.0

replace github.com/meshweaver/supervisor => `+root+`
`)
	write("main.go", `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

func main() {
	ctx := context.Background()
	c, err := client.Dial(ctx, os.Args[1])
	if err != nil {
		panic(err)
	}
	defer c.Close()
	r, err := c.Round(ctx, messages.StartRound{User: "ext", Thread: "t", Text: "hi"})
	if err != nil {
		panic(err)
	}
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			fmt.Print(e.Text)
		}
	}
	v, err := r.Wait()
	fmt.Println("|", v.Status, err)
}
`)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	exe := filepath.Join(dir, "meshcaller")
	goCmd("build", "-o", exe, ".")

	mods := goCmd("list", "-m", "all")
	if strings.Contains(mods, "hollywood") {
		t.Errorf("the caller's build list holds a hollywood module:\n%s", mods)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(gomod), "replace"); n != 1 {
		t.Errorf("go.mod after tidy has %d replace lines, want only the checkout's:\n%s", n, gomod)
	}
	if deps := goCmd("list", "-deps", "."); !strings.Contains(deps, "github.com/meshweaver/supervisor/third_party/hollywood/remote\n") {
		t.Errorf("the caller does not build on the patched transport:\n%s", deps)
	}

	// And the binary works: a round against the test daemon.
	out, err := exec.Command(exe, daemonAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("running the caller: %v\n%s", err, out)
	}
	if got, want := string(out), fakeReply+"| completed <nil>\n"; got != want {
		t.Errorf("the caller printed %q, want %q", got, want)
	}
}
