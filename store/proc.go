package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

// ProcRecord identifies a child process across a restart of the daemon: a
// PID alone may have been reused by then, a PID with its start time may not.
type ProcRecord struct {
	// PID is the process id; codex is started with Setpgid, so it is also
	// the process group id.
	PID int
	// StartTime is field 22 of /proc/PID/stat: clock ticks after boot.
	StartTime uint64
	// Exe is the program that was started, for the humans reading logs.
	// It is not compared.
	Exe string
}

// procHeader is the first line of a process record, version included.
const procHeader = "meshweaver-proc v1"

// maxExeLen bounds ProcRecord.Exe.
const maxExeLen = 4096

// maxProcRecord bounds how much of a process record is read.
const maxProcRecord = maxExeLen + 256

// reapPoll is how often ReapProcRecord looks at /proc while it waits.
const reapPoll = 10 * time.Millisecond

// killWait bounds how long ReapProcRecord waits for a process to vanish
// after SIGKILL.
const killWait = 2 * time.Second

// WriteProcRecord stores rec at path atomically, mode 0600:
//
//	meshweaver-proc v1
//	pid <decimal>
//	start <decimal>
//	exe <path>
//
// each line ending in a newline, nothing else. PID must be above 1,
// StartTime above 0, and Exe at most 4096 bytes without NUL or newline.
func WriteProcRecord(path string, rec ProcRecord) error {
	if err := validateProcRecord(rec); err != nil {
		return fmt.Errorf("writing process record %s: %w", path, err)
	}
	return WriteFileAtomic(path, formatProcRecord(rec), 0o600)
}

// ReadProcRecord reads the record at path. A missing file yields an error
// satisfying errors.Is(err, fs.ErrNotExist); a damaged one an error wrapping
// [ErrCorrupt]. Both name the path.
func ReadProcRecord(path string) (ProcRecord, error) {
	data, err := readSmall(path, maxProcRecord)
	if err == nil {
		var rec ProcRecord
		rec, err = parseProcRecord(data)
		if err == nil {
			return rec, nil
		}
	}
	return ProcRecord{}, fmt.Errorf("reading process record %s: %w", path, err)
}

func validateProcRecord(rec ProcRecord) error {
	switch {
	case rec.PID <= 1:
		// Never 0 or 1: kill(-1) signals every process we may signal.
		return fmt.Errorf("invalid pid %d", rec.PID)
	case rec.StartTime == 0:
		return errors.New("no start time")
	case len(rec.Exe) > maxExeLen:
		return fmt.Errorf("exe is %d bytes, longer than %d", len(rec.Exe), maxExeLen)
	case bytes.ContainsAny([]byte(rec.Exe), "\x00\n"):
		return errors.New("exe contains NUL or a newline")
	}
	return nil
}

func formatProcRecord(rec ProcRecord) []byte {
	return formatFields(procHeader,
		"pid", strconv.Itoa(rec.PID),
		"start", strconv.FormatUint(rec.StartTime, 10),
		"exe", rec.Exe)
}

func parseProcRecord(data []byte) (ProcRecord, error) {
	v, err := parseFields(data, procHeader, "pid", "start", "exe")
	if err != nil {
		return ProcRecord{}, err
	}
	pid, err := strconv.Atoi(v[0])
	if err != nil {
		return ProcRecord{}, corruptf("pid is not a number")
	}
	start, err := strconv.ParseUint(v[1], 10, 64)
	if err != nil {
		return ProcRecord{}, corruptf("start is not a number")
	}
	rec := ProcRecord{PID: pid, StartTime: start, Exe: v[2]}
	if err := validateProcRecord(rec); err != nil {
		return ProcRecord{}, corruptf("%v", err)
	}
	// Only the canonical spelling ("+7" or "007" is not) round-trips.
	if !bytes.Equal(formatProcRecord(rec), data) {
		return ProcRecord{}, corruptf("numbers not in canonical form")
	}
	return rec, nil
}

// procStat is what the reaper needs from /proc/PID/stat.
type procStat struct {
	state byte   // field 3: R, S, D, Z, X, …
	pgrp  int    // field 5
	start uint64 // field 22
}

// alive reports whether the process has not exited: a zombie has.
func (s procStat) alive() bool {
	return s.state != 'Z' && s.state != 'X' && s.state != 'x'
}

func readProcStat(pid int) (procStat, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	data, err := os.ReadFile(path)
	if err == nil {
		var st procStat
		st, err = parseProcStat(data)
		if err == nil {
			return st, nil
		}
	}
	return procStat{}, fmt.Errorf("reading %s: %w", path, err)
}

// parseProcStat parses "pid (comm) state ppid pgrp … starttime …". comm may
// hold spaces and parentheses, so fields are counted after the last ')'.
func parseProcStat(data []byte) (procStat, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("no command name in parentheses")
	}
	fields := bytes.Fields(data[end+1:])
	// fields[0] is field 3 of the line; field n is fields[n-3].
	if len(fields) < 22-2 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(fields))
	}
	if len(fields[0]) != 1 {
		return procStat{}, errors.New("bad state field")
	}
	pgrp, err := strconv.Atoi(string(fields[5-3]))
	if err != nil {
		return procStat{}, errors.New("bad pgrp field")
	}
	start, err := strconv.ParseUint(string(fields[22-3]), 10, 64)
	if err != nil {
		return procStat{}, errors.New("bad starttime field")
	}
	return procStat{state: fields[0][0], pgrp: pgrp, start: start}, nil
}

// ProcStartTime returns the start time of process pid (field 22 of
// /proc/PID/stat, in clock ticks after boot). A process that does not exist
// yields an error satisfying errors.Is(err, fs.ErrNotExist).
func ProcStartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("reading start time: invalid pid %d: %w", pid, fs.ErrNotExist)
	}
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return st.start, nil
}

// IsSameProcess reports whether the process rec describes is still running:
// its PID exists, has not exited (a zombie has), and started at
// rec.StartTime, so the PID was not reused.
func IsSameProcess(rec ProcRecord) bool {
	_, ok := sameProcess(rec)
	return ok
}

func sameProcess(rec ProcRecord) (procStat, bool) {
	if rec.PID <= 1 || rec.StartTime == 0 {
		return procStat{}, false
	}
	st, err := readProcStat(rec.PID)
	if err != nil || !st.alive() || st.start != rec.StartTime {
		return procStat{}, false
	}
	return st, true
}

// ReapProcRecord ends the process recorded at path, left behind by an
// earlier run of the daemon, and removes the record.
//
// Only a process that is provably the recorded one — same PID and start
// time — is signalled: first SIGTERM to its process group (to the process
// alone if it does not lead its group), then, if it is still running after
// grace, SIGKILL. It is not our child and cannot be waited for, so /proc is
// polled every 10ms meanwhile. reaped reports whether the recorded process
// was found running and is now gone.
//
// A missing record yields false and nil. A record that matches no running
// process is removed and yields false and nil. A damaged record is removed
// and yields an error wrapping [ErrCorrupt]. If signalling fails the record
// is kept and the error returned.
func ReapProcRecord(path string, grace time.Duration) (reaped bool, err error) {
	rec, err := ReadProcRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			if rerr := removeIfExists(path); rerr != nil {
				return false, errors.Join(err, rerr)
			}
		}
		return false, err
	}
	reaped, err = reap(rec, grace)
	if err != nil {
		return reaped, fmt.Errorf("reaping process %d of %s: %w", rec.PID, path, err)
	}
	return reaped, removeIfExists(path)
}

func reap(rec ProcRecord, grace time.Duration) (bool, error) {
	if rec.PID == os.Getpid() || rec.PID == syscall.Getpgrp() {
		return false, errors.New("refusing to signal the daemon itself")
	}
	if err := signalIfSame(rec, syscall.SIGTERM); err != nil {
		if errors.Is(err, errNotSame) {
			return false, nil
		}
		return false, err
	}
	if waitGone(rec, grace) {
		return true, nil
	}
	if err := signalIfSame(rec, syscall.SIGKILL); err != nil {
		if errors.Is(err, errNotSame) {
			return true, nil // it exited just now
		}
		return false, err
	}
	if waitGone(rec, killWait) {
		return true, nil
	}
	return false, fmt.Errorf("still running %v after SIGKILL", killWait)
}

var errNotSame = errors.New("not the recorded process")

// signalIfSame sends sig to rec's process group — or to the process alone
// if it does not lead a group — after checking it is still the recorded
// process. ESRCH means it exited in between and is reported as errNotSame.
func signalIfSame(rec ProcRecord, sig syscall.Signal) error {
	st, ok := sameProcess(rec)
	if !ok {
		return errNotSame
	}
	target := rec.PID
	if st.pgrp == rec.PID {
		target = -rec.PID
	}
	err := syscall.Kill(target, sig)
	if errors.Is(err, syscall.ESRCH) {
		return errNotSame
	}
	if err != nil {
		return fmt.Errorf("sending %v: %w", sig, err)
	}
	return nil
}

// waitGone polls until rec's process is gone or d has passed, and reports
// whether it is gone.
func waitGone(rec ProcRecord, d time.Duration) bool {
	if !IsSameProcess(rec) {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(reapPoll)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if !IsSameProcess(rec) {
				return true
			}
		case <-deadline.C:
			return !IsSameProcess(rec)
		}
	}
}
