// Package policy answers the requests the codex app-server sends (command
// and file-change approvals, questions for the user, MCP elicitations):
// in-line, by a round's auto_approve, or, under on_request ask, by what
// its caller answered, checked against the request. It is pure: no
// goroutines, no actors, no I/O. The app-server actor and the round log
// call it.
package policy
