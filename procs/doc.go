// Package procs owns what the daemon does to processes it did not just
// start and wait for: reading a process's parent, process group, start
// time, uid and environment from /proc (through
// github.com/prometheus/procfs), scanning for processes that match a
// predicate, and signalling a process or its group only while its start
// time proves it is the one that was recorded, so that a reused pid is
// never hit.
//
// A process is named by an [ID]: pid and start time (field 22 of
// /proc/PID/stat, clock ticks after boot), which together are never reused.
// The pid records the daemon leaves beside each home are written by package
// store; [ReapRecord] reads one and ends the process it names.
//
// Reading works on any proc tree ([NewFS], for tests on a fake one);
// signalling only ever consults the host's /proc.
package procs
