package codexproc

// head is a line's prefix of at most n bytes, for test messages.
func head(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
