// Package turninput turns a round's request into its turn/start: the text
// with its images (data URLs, or files checked to stay inside the
// workspace), its output schema, its context (native, or folded into the
// text for an older CLI), and its sandbox and approval policy clamped to
// the operator's bounds (Bounds), each clamp a note for the caller. It is
// pure apart from the image files it checks (it resolves and stats them,
// never reads them): no goroutines, no actors. The round actor calls
// Params when it starts its turn.
package turninput
