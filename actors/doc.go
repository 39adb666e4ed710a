// Package actors is the daemon's actor tree on hollywood: a root that routes
// by user, one supervising actor per user, and under each user the codex
// app-server actor, the thread-registry actor, the login actor and one actor
// per round in flight. docs/ARCHITECTURE.md draws the tree and says who owns
// which goroutine, process and file. The pure parts the actors call are
// packages of their own, which import no actor: eventmap (what the
// app-server says, as round events), policy (the answers to its requests)
// and turninput (a round's request as turn/start).
package actors
