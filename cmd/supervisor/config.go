package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/isolate"
)

// configCmd prints serve's effective settings and their sources; with
// --json, one JSON object a setting, with what serve resolves it to where
// it decides at start (resolveSettings).
func configCmd(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveFlags(fs)
	// --json is config's own, not serve's: taken off the line before
	// serve's settings are read, so that no SUPERVISOR_JSON or file line
	// can set it.
	args, asJSON := takeJSONFlag(args)
	src, errs, err := readServeSettings(fs, o, args, lookup)
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		var lines []string
		for _, e := range errs {
			lines = append(lines, strings.Split(e.Error(), "\n")...)
		}
		printUsageErrors(fs, lines)
		return errUsage
	}
	if asJSON {
		return printSettingsJSON(stdout, fs, src, resolveSettings(o))
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
	fs.VisitAll(func(f *flag.Flag) {
		source := src[f.Name]
		if source == "" {
			source = "default"
		}
		values := []string{f.Value.String()}
		if l, ok := f.Value.(*stringList); ok {
			values = *l
			if len(values) == 0 {
				values = []string{""}
			}
		}
		for _, v := range values {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, showValue(redactSetting(f, v)), source)
		}
	})
	return tw.Flush()
}

// secretName is a setting's name that says its value is a secret.
var secretName = regexp.MustCompile(`(?i)(^|-)(api-?key|key|token|password|passwd|secret|credentials?)($|-)`)

// secretWord is what marks a secret in a KEY=VALUE entry, in the key or in
// the value (an override's TOML may hold a header).
var secretWord = regexp.MustCompile(`(?i)key|token|passw|secret|credential|auth|bearer|cookie|\bsk-`)

// urlPassword is the password of a URL: scheme://user:password@host.
var urlPassword = regexp.MustCompile(`(://[^/@:\s]*):[^/@\s]*@`)

// redactSetting is v, a value of f, with its secrets replaced by
// <redacted>. A setting whose name says key, token, password or secret is
// redacted whole unless its value is a file (its placeholder FILE, PATH or
// DIR): a path to a secret is not one.
func redactSetting(f *flag.Flag, v string) string {
	v = urlPassword.ReplaceAllString(v, "$1:<redacted>@")
	if v == "" {
		return v
	}
	if _, ok := f.Value.(*stringList); ok {
		if k, val, ok := strings.Cut(v, "="); ok && (secretWord.MatchString(k) || secretWord.MatchString(val)) {
			return k + "=<redacted>"
		}
		return v
	}
	placeholder, _ := flag.UnquoteUsage(f)
	switch placeholder {
	case "FILE", "PATH", "DIR":
		return v
	}
	if secretName.MatchString(f.Name) {
		return "<redacted>"
	}
	return v
}

// showValue quotes a value that is empty or holds spaces.
func showValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"") {
		return strconv.Quote(v)
	}
	return v
}

// takeJSONFlag removes config's --json (-json, --json=true or false) from
// args, before any "--", and reports whether it was set.
func takeJSONFlag(args []string) (rest []string, on bool) {
	for i, a := range args {
		if a == "--" {
			return append(rest, args[i:]...), on
		}
		switch a {
		case "--json", "-json", "--json=true", "-json=true":
			on = true
		case "--json=false", "-json=false":
			on = false
		default:
			rest = append(rest, a)
		}
	}
	return rest, on
}

// resolved is what serve makes of a setting at start, and why.
type resolved struct {
	Value string `json:"resolved"`
	Why   string `json:"why"`
}

// resolveSettings says what serve, started here with o, would make of
// each setting it decides at start: auto values, defaults taken from other
// settings or from the host, the CLI it finds. It changes nothing (the
// bubblewrap probe runs a sandbox, as serve's start does).
func resolveSettings(o *serveOptions) map[string]resolved {
	r := map[string]resolved{}
	if o.logFormat == "auto" {
		v, why := "json", "auto: json where stderr is not a terminal (this command's is not)"
		if isTerminal(os.Stderr) {
			v, why = "text", "auto: text on a terminal (this command's stderr is one; a service's is not)"
		}
		r["log-format"] = resolved{v, why}
	}
	resolve, why := codexproc.ResolveInstalled, "$CODEX_BIN, else codex on PATH"
	if o.op.demoModel {
		resolve, why = codexproc.ResolveBinary, "$CODEX_BIN, else the project-local install (--demo-model), else codex on PATH"
	}
	if o.codex != "" {
		why = "as given"
	}
	if bin, err := resolve(o.codex); err == nil {
		r["codex"] = resolved{bin, why}
	} else {
		r["codex"] = resolved{"", err.Error()}
	}
	uids, err := isolate.ParseRange(o.isolation.uidRange)
	if err == nil {
		host := isolate.Detect(o.isolation.bwrap, uids)
		switch {
		case uids.Empty():
		case host.SetUID:
			r["uid-range"] = resolved{uids.String(), "the daemon may switch uids here"}
		default:
			r["uid-range"] = resolved{"off", "the daemon may not switch uids here (run it as root, or with CAP_SETUID, CAP_SETGID and CAP_CHOWN)"}
		}
		switch {
		case o.isolation.bwrap == "off":
		case host.BwrapErr != nil:
			r["bwrap"] = resolved{"off", host.BwrapErr.Error()}
		default:
			r["bwrap"] = resolved{host.Bwrap, "a sandbox of it worked here"}
		}
	}
	def := contain.Defaults()
	for name, v := range map[string]struct{ value, set, why string }{
		"user-memory-max": {contain.FormatSize(def.Memory), o.limits.memory, "auto: a quarter of this node's memory"},
		"user-pids-max":   {strconv.FormatInt(def.Pids, 10), o.limits.pids, "auto"},
		"user-cpu-max":    {contain.FormatCPU(def.CPU), o.limits.cpu, "auto: half this node's cores, at least 1"},
	} {
		if v.set == "auto" {
			r[name] = resolved{v.value, v.why}
		}
	}
	if o.limits.cgroupVersion == "auto" {
		l, _, _ := o.limits.parsed()
		if rep := contain.Probe(o.limits.contain(o.homes, o.cluster.memberOf(), l)); rep.Version > 0 {
			r["cgroup-version"] = resolved{strconv.Itoa(rep.Version), "auto: the hierarchy mounted here"}
		} else {
			r["cgroup-version"] = resolved{"none", "auto: no cgroup hierarchy the limits can use here"}
		}
	}
	if o.maxSandbox == "" {
		r["max-sandbox"] = resolved{o.sandbox, "--sandbox"}
	}
	if o.approvals == "" {
		r["allow-approval-policies"] = resolved{o.approval, "--approval-policy only"}
	}
	return r
}

// settingJSON is one line of config --json.
type settingJSON struct {
	Name   string   `json:"name"`
	Value  *string  `json:"value,omitempty"`
	Values []string `json:"values,omitempty"` // a repeatable setting's
	Source string   `json:"source"`
	*resolved
}

// printSettingsJSON writes one JSON object a setting: its name, value (or
// values), source, and what serve resolves it to where res says.
func printSettingsJSON(w io.Writer, fs *flag.FlagSet, src map[string]string, res map[string]resolved) error {
	enc := json.NewEncoder(w)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		s := settingJSON{Name: f.Name, Source: src[f.Name]}
		if s.Source == "" {
			s.Source = "default"
		}
		if l, ok := f.Value.(*stringList); ok {
			s.Values = []string{}
			for _, v := range *l {
				s.Values = append(s.Values, redactSetting(f, v))
			}
		} else {
			v := redactSetting(f, f.Value.String())
			s.Value = &v
		}
		if r, ok := res[f.Name]; ok {
			s.resolved = &r
		}
		if err == nil {
			err = enc.Encode(s)
		}
	})
	return err
}
