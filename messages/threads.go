package messages

// Thread messages: a caller lists, reads, archives, forks and compacts the
// mesh threads of a user. Each command gets one answer (Engine.Request
// works); a failure is the answer's Error, a refused command a Rejected.

// ListThreads asks for the mesh threads of User the daemon knows, most
// recently active first. Reply: [Threads].
type ListThreads struct {
	User string `msgpack:"user,omitempty"`
	// Limit bounds the answer; 0 means MaxThreadsListed.
	Limit int `msgpack:"limit,omitempty"`
}

// Threads answers [ListThreads].
type Threads struct {
	User    string       `msgpack:"user,omitempty"`
	Threads []ThreadInfo `msgpack:"threads,omitempty"`
	// Truncated reports that the user has more threads than were listed.
	Truncated bool   `msgpack:"truncated,omitempty"`
	Error     string `msgpack:"error,omitempty"`
}

// ThreadInfo is one mesh thread of a [Threads] answer.
type ThreadInfo struct {
	// Thread is the mesh thread key.
	Thread string `msgpack:"thread,omitempty"`
	// CodexThreadID is the codex thread that runs it.
	CodexThreadID string `msgpack:"codex_thread_id,omitempty"`
	// Name is the thread's name, if it has one.
	Name string `msgpack:"name,omitempty"`
	// LastActivityUnix is when the thread last ran a round, Unix seconds.
	LastActivityUnix int64 `msgpack:"last_activity_unix,omitempty"`
}

// ReadThread asks for the turns of User's mesh thread Thread. Reply:
// [ThreadTurns].
type ReadThread struct {
	User   string `msgpack:"user,omitempty"`
	Thread string `msgpack:"thread,omitempty"`
}

// ThreadTurns answers [ReadThread]: the thread's turns, oldest first.
type ThreadTurns struct {
	Thread        string `msgpack:"thread,omitempty"`
	CodexThreadID string `msgpack:"codex_thread_id,omitempty"`
	Turns         []Turn `msgpack:"turns,omitempty"`
	Error         string `msgpack:"error,omitempty"`
}

// ArchiveThread archives User's mesh thread Thread: codex archives its
// thread and the daemon forgets the mapping. Reply: [ThreadArchived].
type ArchiveThread struct {
	User   string `msgpack:"user,omitempty"`
	Thread string `msgpack:"thread,omitempty"`
}

// ThreadArchived answers [ArchiveThread]: OK, or Error says why not.
type ThreadArchived struct {
	Thread string `msgpack:"thread,omitempty"`
	OK     bool   `msgpack:"ok,omitempty"`
	Error  string `msgpack:"error,omitempty"`
}

// ForkThread makes NewThread, a new mesh thread of User, from a copy of
// Thread's codex thread. Reply: [ThreadForked].
type ForkThread struct {
	User      string `msgpack:"user,omitempty"`
	Thread    string `msgpack:"thread,omitempty"`
	NewThread string `msgpack:"new_thread,omitempty"`
}

// ThreadForked answers [ForkThread].
type ThreadForked struct {
	Thread        string `msgpack:"thread,omitempty"`
	NewThread     string `msgpack:"new_thread,omitempty"`
	CodexThreadID string `msgpack:"codex_thread_id,omitempty"`
	Error         string `msgpack:"error,omitempty"`
}

// CompactThread asks codex to compact the history of User's mesh thread
// Thread, freeing its context window. Reply: [ThreadCompacted].
type CompactThread struct {
	User   string `msgpack:"user,omitempty"`
	Thread string `msgpack:"thread,omitempty"`
}

// ThreadCompacted answers [CompactThread]: OK once codex has compacted
// the thread, or Error says why not.
type ThreadCompacted struct {
	Thread string `msgpack:"thread,omitempty"`
	OK     bool   `msgpack:"ok,omitempty"`
	Error  string `msgpack:"error,omitempty"`
}

// registerThreads adds the thread messages to the catalog.
func registerThreads(r *registry) {
	register[ListThreads](r, "list_threads.v1")
	register[Threads](r, "threads.v1")
	register[ReadThread](r, "read_thread.v1")
	register[ThreadTurns](r, "thread_turns.v1")
	register[ArchiveThread](r, "archive_thread.v1")
	register[ThreadArchived](r, "thread_archived.v1")
	register[ForkThread](r, "fork_thread.v1")
	register[ThreadForked](r, "thread_forked.v1")
	register[CompactThread](r, "compact_thread.v1")
	register[ThreadCompacted](r, "thread_compacted.v1")
}

// Validate checks that User is present and Limit is within 0 and
// MaxThreadsListed.
func (m ListThreads) Validate() error {
	c := checker{name: "list_threads.v1"}
	c.user(m.User)
	if m.Limit < 0 || m.Limit > MaxThreadsListed {
		c.failf("limit is %d, want 0 to %d", m.Limit, MaxThreadsListed)
	}
	return c.err
}

// Validate checks that User and Thread are present and within bounds.
func (m ReadThread) Validate() error { return validateUserThread("read_thread.v1", m.User, m.Thread) }

// Validate checks that User and Thread are present and within bounds.
func (m ArchiveThread) Validate() error {
	return validateUserThread("archive_thread.v1", m.User, m.Thread)
}

// Validate checks that User and Thread are present and within bounds.
func (m CompactThread) Validate() error {
	return validateUserThread("compact_thread.v1", m.User, m.Thread)
}

// Validate checks that User, Thread and NewThread are present, within
// bounds, and that NewThread is not Thread.
func (m ForkThread) Validate() error {
	c := checker{name: "fork_thread.v1"}
	c.user(m.User)
	c.id("thread", m.Thread, MaxThreadLen, true)
	c.id("new_thread", m.NewThread, MaxThreadLen, true)
	if m.Thread != "" && m.Thread == m.NewThread {
		c.failf("new_thread is the same as thread")
	}
	return c.err
}

func validateUserThread(name, user, thread string) error {
	c := checker{name: name}
	c.user(user)
	c.id("thread", thread, MaxThreadLen, true)
	return c.err
}
