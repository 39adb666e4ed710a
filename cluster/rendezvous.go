package cluster

import "github.com/zeebo/xxh3"

// Pick returns the member with the highest rendezvous score for key
// ("highest random weight" hashing), "" when there is none. Every member
// computes the same answer from the same set, in any order; a member that
// joins takes exactly the keys it now scores highest on, and one that
// leaves hands each of its keys to that key's runner-up, so a change of
// membership moves only 1/n of the keys.
func Pick(key string, members []string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		s := score(m, key)
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// score hashes key seeded with the member's own hash, so ("ab","c") and
// ("a","bc") stay apart and nothing is allocated.
func score(member, key string) uint64 {
	return xxh3.HashStringSeed(key, xxh3.HashString(member))
}
