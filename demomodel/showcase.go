package demomodel

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Call ids of the showcase's shell commands.
const (
	ShowcaseListCall = "demo-ls"
	ShowcaseNoteCall = "demo-note"
)

// ShowcaseNote is the file the showcase's second command writes into the
// workspace, and ShowcaseNoteCommand the command. It asks to run outside
// the (read-only) sandbox, so under the "on-request" approval policy codex
// asks for an approval first.
const (
	ShowcaseNote        = "note.txt"
	ShowcaseNoteCommand = "echo 'hello from the demo' > " + ShowcaseNote
)

// ShowcaseDelay is the pause between the streamed deltas of the showcase,
// so that a person sees the answer arrive word by word.
const ShowcaseDelay = 25 * time.Millisecond

// ShowcaseResponder is the demo model of `supervisor demo` and `serve
// --demo-model`: a deterministic stand-in that shows what the daemon
// carries, deciding each answer from the conversation in the request
// (which is all a real model sees too):
//
//   - asked what is in the workspace (or to list files), it thinks aloud (a
//     reasoning summary) and runs `ls -l` through codex's shell tool; once
//     the output comes back it streams an answer quoting it;
//   - asked to save or write a note, it runs a command that writes
//     note.txt outside the sandbox, which codex runs only after an
//     approval;
//   - asked what was said before (earlier, ago, remember), it answers by
//     quoting the user's earlier messages of the thread, so a resumed round
//     shows that the thread kept them;
//   - anything else gets a short reply that echoes the message and says
//     what to try.
//
// Compaction requests get a one-line summary.
func ShowcaseResponder(req *Request) Script {
	if req.IsCompaction() {
		return Text(Words("Summary (demo model): the user tried the demo: a listing, a note and a look back.")...)
	}
	if callID, out, ok := lastToolOutput(req); ok {
		out = commandOutput(out)
		switch callID {
		case ShowcaseListCall:
			return slow(fmt.Sprintf("The workspace holds %s. I read that from the output of a real `ls -l`, which codex ran in its read-only sandbox.", entries(out)))
		case ShowcaseNoteCall:
			return slow(fmt.Sprintf("Saved %s in the workspace. The sandbox is read-only, so codex asked for approval to run the command outside it, and the daemon approved because this round allows it.", ShowcaseNote))
		}
		return slow("The tool finished. (I am the demo model, so that is all I can say about it.)")
	}
	said := strings.Join(strings.Fields(req.LastUserText()), " ")
	low := strings.ToLower(said)
	switch {
	case containsAny(low, "workspace", "list", "files", "ls"):
		return Respond(
			Reasoning(Words("The user wants to know what the workspace holds. Listing it is a read-only command, so codex can run it in its sandbox without asking.")...),
			shellCall(ShowcaseListCall, "ls -l"),
		).WithDelay(ShowcaseDelay)
	case containsAny(low, "note", "save", "write"):
		return Respond(
			Reasoning(Words("Saving a note writes a file, and the sandbox is read-only, so the command must run outside it: codex asks for approval first.")...),
			escalatedCall(ShowcaseNoteCall, ShowcaseNoteCommand, "Saving the note writes a file into the workspace, which the read-only sandbox forbids."),
		).WithDelay(ShowcaseDelay)
	case containsAny(low, "ago", "earlier", "before", "remember", "previous"):
		var earlier []string
		texts := req.UserTexts()
		for _, t := range texts[:max(0, len(texts)-1)] {
			if t = strings.Join(strings.Fields(t), " "); t != "" && !strings.HasPrefix(t, "<") {
				earlier = append(earlier, "“"+t+"”")
			}
		}
		reason := Reasoning(Words("I look back through the conversation this thread holds.")...)
		if len(earlier) == 0 {
			return Respond(reason, Message(Words("This thread holds nothing before this message: it is our first exchange.")...)).WithDelay(ShowcaseDelay)
		}
		return Respond(reason, Message(Words(fmt.Sprintf("Before this message you said, in order: %s. I know because the daemon resumed the same codex thread, so the whole conversation came with your question.", strings.Join(earlier, ", then ")))...)).WithDelay(ShowcaseDelay)
	case said == "":
		return slow("Hello! I am the demo model. Ask me what is in the workspace, to save a note, or what you asked before.")
	}
	return Respond(
		Reasoning(Words("This is not one of the things the demo model knows how to do, so it echoes the message.")...),
		Message(Words("I am the demo model, a stand-in for a real AI. You said: “"+clip(said, 60)+"”. Try: what is in the workspace? / save a note / what did I ask before?")...),
	).WithDelay(ShowcaseDelay)
}

// slow is a message streamed word by word with ShowcaseDelay between
// deltas; a part holding a line break goes as one delta.
func slow(parts ...string) Script {
	var deltas []string
	for _, p := range parts {
		if strings.Contains(p, "\n") {
			deltas = append(deltas, p)
			continue
		}
		deltas = append(deltas, Words(p)...)
	}
	return Text(deltas...).WithDelay(ShowcaseDelay)
}

// shellCall is an exec_command call of cmd without a login shell (a login
// shell would read the service's profile and print its noise).
func shellCall(callID, cmd string) Item {
	return FunctionCall(callID, "exec_command", string(mustJSON(map[string]any{"cmd": cmd, "login": false})))
}

// escalatedCall is an exec_command call of cmd that asks to run outside
// the sandbox: under the "on-request" approval policy codex asks for an
// approval first, with justification as the question.
func escalatedCall(callID, cmd, justification string) Item {
	return FunctionCall(callID, "exec_command", string(mustJSON(map[string]any{
		"cmd": cmd, "login": false, "sandbox_permissions": "require_escalated", "justification": justification,
	})))
}

// lastToolOutput is the call id and output of the request's last input
// item when that is a tool's output.
func lastToolOutput(req *Request) (callID, output string, ok bool) {
	switch req.LastInputType() {
	case "function_call_output", "custom_tool_call_output":
	default:
		return "", "", false
	}
	var head struct {
		CallID string `json:"call_id"`
	}
	if err := json.Unmarshal(req.LastInput(), &head); err != nil {
		return "", "", false
	}
	out, _ := req.ToolOutput(head.CallID)
	return head.CallID, out, true
}

// commandOutput is what a command printed: codex wraps it in a report
// ("Chunk ID: …", "Process exited with code 0", "Output:" and then the
// output); without that wrapping the text is taken whole.
func commandOutput(report string) string {
	if _, out, ok := strings.Cut(report, "Output:\n"); ok {
		report = out
	}
	return strings.TrimRight(report, "\n")
}

// entries names the files of an `ls -l` listing: "SKILLS.md and x".
func entries(listing string) string {
	var names []string
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) >= 9 && (strings.HasPrefix(f[0], "-") || strings.HasPrefix(f[0], "d")) {
			names = append(names, strings.Join(f[8:], " "))
		}
	}
	switch len(names) {
	case 0:
		return "nothing"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func containsAny(s string, words ...string) bool {
	for _, w := range strings.Fields(strings.NewReplacer("?", " ", "!", " ", ".", " ", ",", " ").Replace(s)) {
		for _, x := range words {
			if w == x {
				return true
			}
		}
	}
	return false
}

func clip(s string, words int) string {
	if f := strings.Fields(s); len(f) > words {
		return strings.Join(f[:words], " ") + " …"
	}
	return s
}
