// Package cluster spreads users over several daemons that share a homes
// volume, with etcd as the only judge of who owns a user.
//
//   - Membership: each member holds an etcd lease and keeps its member key
//     (/meshweaver/<cluster>/members/<member>, value: its remote address)
//     attached to it; every member watches the member keys.
//   - Ownership: one key per user (/meshweaver/<cluster>/owners/<user>,
//     value: the owner's member id), created by compare-and-create and
//     bound to the owner's lease, so it dies with the owner. Its creation
//     revision is the fencing token. A user without an owner is placed by
//     rendezvous hashing ([Pick]) over the live members; once claimed, the
//     key decides, and the user stays with its owner until the owner lets
//     it go (its actors went idle) or dies.
//   - Fencing: a member treats its lease as lost [Deadline.Margin] before
//     it could expire (the expiry counted from when the last successful
//     keepalive was sent) and stops every app-server then; an
//     out-of-process fence (supervisor fence) does the same when the
//     daemon itself is paused or hung.
//
// A [Node] is one member's view; it implements actors.Placement.
package cluster
