package actors

import "strings"

// userPath is where a user's actor stands in every PID of its subtree:
// root/user/<user id>/….
const userPath = RootKind + "/" + RootID + "/user/"

// userChildren are the kinds a user actor spawns: what follows the user id
// in a PID of its subtree.
var userChildren = []string{"/registry/", "/codex/", "/login/", "/log/", "/threadop/"}

// HashUserInPID returns s (a PID, or a text quoting one) with the user id
// in its path replaced by the user's tag (messages.UserTag), so that a
// log line names users the same way at every level: hollywood's lifecycle
// lines and the panic guard name actors by PID, and a user actor's ID is
// its user id. A user id may hold "/": the id runs to the last child kind
// of the path, so a hostile id that spells one is hashed whole (a round id
// that spells one hashes part of itself with it, and leaks nothing).
func HashUserInPID(s string) string {
	i := strings.Index(s, userPath)
	if i < 0 {
		return s
	}
	head, rest := s[:i+len(userPath)], s[i+len(userPath):]
	end := len(rest)
	if j := lastChild(rest); j > 0 {
		end = j
	}
	return head + userTag(rest[:end]) + rest[end:]
}

func lastChild(s string) int {
	last := -1
	for _, k := range userChildren {
		if j := strings.LastIndex(s, k); j > last {
			last = j
		}
	}
	return last
}
