package main

import (
	"flag"
	"fmt"
	"io"
)

// commandDoc is a command's help: how it is called, what it does, and
// what its exit statuses mean; its flags come from its FlagSet.
type commandDoc struct{ synopsis, about, exits string }

// callerExits are the exit statuses of the caller commands but round.
const callerExits = "0 done; 1 refused by the daemon, no answer within --timeout, the daemon unreachable (or another error); 2 usage."

// callerAbout is what every caller command shares: the flags' variables.
const callerAbout = `It is a remote caller in an engine of its own: --addr is the daemon's
--listen, --listen its own address for the answers. --addr, --tls-cert,
--tls-key, --tls-ca and --server-id default to $SUPERVISOR_ADDR,
$SUPERVISOR_TLS_CERT, _KEY, _CA and $SUPERVISOR_SERVER_ID. A daemon
serving mutual TLS needs --tls-* here too.`

// docOf is the help of the command whose FlagSet is called name.
func docOf(name string) commandDoc {
	switch name {
	case "serve":
		return commandDoc{"supervisor serve --homes DIR --workspace DIR [flags]",
			`Runs the daemon: one supervised codex app-server per mesh user, the
remote listener other actors reach, and /metrics, /healthz, /readyz.

Every flag can also be set in the environment as SUPERVISOR_<NAME>
(upper case, dashes as underscores) or in the --config file (one
"name value" a line). The command line wins over the environment, the
environment over the file. Repeatable flags take a comma-separated list
in the environment. --check validates everything (binds the listeners,
checks the paths the users' uids need, probes a round in a temporary
folder it removes) and exits. SIGHUP reloads the TLS files, the log
level and the limits; SIGTERM drains and stops.`,
			"0 stopped cleanly (SIGTERM, SIGINT), or --check found nothing wrong; 1 a start that failed, or a stop past --stop-timeout; 2 invalid settings, or --check's problems (every one listed)."}
	case "config":
		return commandDoc{"supervisor config [--json] [serve's flags]",
			`Prints the settings "supervisor serve" would run with, given the same
flags, environment (SUPERVISOR_*) and --config file: one line per setting
with its value and where it came from (flag, the variable, the file, or
default), repeatable settings once per value. --json prints one object
a setting instead, with "resolved" and "why" where serve decides a value
at start (auto: what it becomes on this host). Secrets are redacted: a value whose
setting names a key, token, password or secret (paths to such files are
shown), KEY=VALUE entries whose key or value looks like one, and the
password of a URL. It does not validate the settings: "serve --check" does.`,
			"0 printed; 2 usage (an unknown flag, a bad value)."}
	case "demo":
		return commandDoc{"supervisor demo [--dir DIR] [--codex PATH] [MESSAGE...]",
			`Runs the daemon against an embedded demo model (no account, no network)
and chats with it over the remote as a mesh actor would: three rounds by
default, or one per MESSAGE.`,
			"0 every round completed; 1 failed (or another error); 2 usage; 3 interrupted, 4 busy, 5 unavailable, 6 rejected (a round's verdict, as round's)."}
	case "round":
		return commandDoc{"supervisor round --user ID --thread KEY [flags] MESSAGE...",
			`Sends one chat round to the daemon and streams its answer: the text to
stdout, reasoning, tools (a failed one with the end of its output) and the
final status line, which names the tools that failed, to stderr ("--json":
one JSON object a line on stdout, each with "type", "round_id" and "time",
the fields named as on the wire).
Flags may follow the message; "--" ends them. The MCP bearer token comes
from $SUPERVISOR_MCP_TOKEN.

` + callerAbout,
			"0 completed, 1 failed (or another error), 2 usage, 3 interrupted, 4 busy, 5 unavailable, 6 rejected, 7 no verdict (daemon unreachable, message refused, or --timeout passed), 8 the user's token budget is spent (refused before the model, or interrupted at the budget; the status line says when it frees up)."}
	case "interrupt":
		return commandDoc{"supervisor interrupt --user ID --thread KEY [--round-id ID] [flags]",
			"Interrupts the running round of a mesh thread (only --round-id's when given)\nand prints whether the daemon accepted.\n\n" + callerAbout,
			callerExits}
	case "steer":
		return commandDoc{"supervisor steer --user ID --thread KEY [--round-id ID] [flags] MESSAGE...",
			"Adds MESSAGE to the running round of a mesh thread and prints whether the\ndaemon accepted.\n\n" + callerAbout,
			callerExits}
	case "login":
		return commandDoc{"supervisor login --user ID [--api-key-stdin] [flags]",
			`Logs a user in with ChatGPT: prints the URL and the device code, then
waits for the approval (Ctrl-C cancels the login). With --api-key-stdin
it stores the OpenAI API key read from stdin as the user's credential
instead.

` + callerAbout,
			"0 logged in (or the key stored); 1 the login failed, was refused or timed out (or another error); 2 usage."}
	case "logout":
		return commandDoc{"supervisor logout --user ID [flags]",
			"Clears a user's stored credential and codex login.\n\n" + callerAbout, callerExits}
	case "models":
		return commandDoc{"supervisor models --user ID [--all] [flags]",
			"Lists the models a user's codex offers, with their reasoning efforts.\n\n" + callerAbout, callerExits}
	case "account":
		return commandDoc{"supervisor account --user ID [flags]",
			"Shows a user's codex account: its type, email and plan, or that it is\nnot logged in.\n\n" + callerAbout, callerExits}
	case "usage":
		return commandDoc{"supervisor usage --user ID [flags]",
			"Shows a user's use of this node's limits: memory, processes, CPU, disk.\n\n" + callerAbout, callerExits}
	case "bench":
		return commandDoc{"supervisor bench [--quick] [--only PHASES] [flags]",
			`Measures the daemon against a direct client of the same codex CLI on
the embedded demo model (rounds, events, MCP, memory, limits) and prints
the table (docs/BENCHMARKS.md).`,
			"0 measured; 1 a phase failed (or another error); 2 usage."}
	case "fence":
		return commandDoc{"supervisor fence --daemon-pid PID [flags] < the daemon's pipe",
			`The out-of-process fence of a cluster member: serve starts it and writes
it each new fence time on its stdin; past the last one it kills the
daemon's app-servers, and when the daemon dies it revokes the daemon's
lease once they are dead (docs/DEPLOY.md). Not for running by hand.`,
			"0 its input ended; 1 an error (the daemon's pid, its input); 2 usage."}
	case "version":
		return commandDoc{"supervisor version [--json]",
			"Prints the version, commit, Go version and pinned codex CLI: one line,\nor one JSON object with --json.",
			"0 printed; 2 usage."}
	}
	return commandDoc{"supervisor " + name + " [flags]", "", "0 done; 1 an error; 2 usage."}
}

// helpError is -h or --help on a command's line: runCLI prints the
// command's help (writeHelp) on stdout and exits 0. errors.Is takes it for
// flag.ErrHelp.
type helpError struct{ fs *flag.FlagSet }

func (helpError) Error() string        { return flag.ErrHelp.Error() }
func (helpError) Is(target error) bool { return target == flag.ErrHelp }

// writeHelp prints fs's command's help to w: synopsis, what it does, its
// flags with their defaults, and its exit statuses.
func writeHelp(w io.Writer, fs *flag.FlagSet) {
	d := docOf(fs.Name())
	fmt.Fprintf(w, "usage: %s\n", d.synopsis)
	if d.about != "" {
		fmt.Fprintf(w, "\n%s\n", d.about)
	}
	fmt.Fprintln(w, "\nflags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
	fmt.Fprintf(w, "\nexit status: %s\n", d.exits)
}
