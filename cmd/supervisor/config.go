package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// configCmd prints serve's effective settings and their sources.
func configCmd(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveFlags(fs)
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
