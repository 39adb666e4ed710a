// Package eventmap reads what the codex app-server says and turns it into
// what the mesh sees: a round's notifications into round events and the
// details of its verdict (Mapper), a failed turn's error into a class the
// caller can act on, a notification's header and thread id without a full
// decode, and the child agents' threads (ChildThreads), so that their
// notifications and requests reach their parent's round. It is pure: no
// goroutines, no actors, no I/O. The round actor and the app-server actor
// call it.
package eventmap
