// Package peeruid keeps the users' agents off the daemon's own listeners.
//
// Every user's app-server (and whatever its agent runs) shares the host's
// network namespace: codex must reach its model. A plaintext listener on
// 127.0.0.1 is therefore reachable by every user's agent. Where each user
// runs as a uid of its own (isolate, a uid range), the kernel knows which
// uid owns the socket at the other end of a local TCP connection, and a
// listener wrapped by [Wrap] asks it (NETLINK_SOCK_DIAG, an exact lookup of
// the peer's 4-tuple, [Lookup]) before the connection is handed to the
// server: a connection whose peer socket belongs to a uid of the range is
// closed unread, and so is a local peer whose owner cannot be proven (its
// socket is gone or has no owner any more). Peers on other hosts are not
// looked up: their uid is not this kernel's to tell, and the listener's
// own authentication (mutual TLS) is what guards against them.
//
// Accept never waits on a lookup: a background goroutine accepts, a
// bounded number of checks run at once, each within a timeout, and Accept
// returns the connections that passed.
package peeruid
