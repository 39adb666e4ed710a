// Package contain bounds what one user's app-server, its sandbox and every
// process they start may take from the node: a cgroup of the user's own
// (memory with swap, processes, CPU), made before the process starts and
// under a parent the daemon owns, on cgroup v2 or on the v1 memory, pids
// and cpu hierarchies, through github.com/containerd/cgroups/v3; and a
// disk quota on the user's home, a filesystem image of the user's own
// mounted on it (Disk).
//
// A [Node] is the daemon's only owner of that tree: it creates, limits,
// empties and removes every user's cgroup ([Node.Group], [Group.Kill],
// [Group.Remove]), applies changed limits to every live one
// ([Node.SetLimits]), and at start empties what a killed daemon left
// ([Node.Sweep]). It is safe for concurrent use. The app-server actors
// call it, one user each.
package contain
