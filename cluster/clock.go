package cluster

import (
	"time"

	"golang.org/x/sys/unix"
)

// BootNow reads the boot clock (CLOCK_BOOTTIME) as a time.Time: the time
// since the kernel started, counting the time the machine was suspended.
//
// Go's own monotonic readings come from CLOCK_MONOTONIC, which stops
// while a VM is suspended or a laptop sleeps. etcd's leader, elsewhere,
// does not stop: a member suspended for longer than its TTL wakes with a
// lease that expired long ago and, on the monotonic clock, a fence time
// still in the future. On the boot clock the fence time has passed.
// Every time the fencing arithmetic compares (Node's deadline, the fence
// helper's) is read from this clock, never mixed with time.Now.
func BootNow() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Linux has had CLOCK_BOOTTIME since 2.6.39; without it, the
		// wall clock (which also counts a suspension) is the best there is.
		return time.Unix(0, time.Now().UnixNano())
	}
	return time.Unix(0, ts.Nano())
}
