package store

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// ProcRecord identifies a child process across a restart of the daemon: a
// PID alone may have been reused by then, a PID with its start time may not.
// Package procs reads it back to end that process (procs.ReapRecord); this
// package only stores it.
type ProcRecord struct {
	// PID is the process id; codex is started with Setpgid, so it is also
	// the process group id.
	PID int
	// StartTime is field 22 of /proc/PID/stat: clock ticks after boot.
	StartTime uint64
	// Exe is the program that was started, for the humans reading logs.
	// It is not compared.
	Exe string
	// Member is the cluster member that started it ("" for a daemon that
	// is not in a cluster), and Boot the boot id of the kernel it runs on
	// (/proc/sys/kernel/random/boot_id; "" when unknown). On a homes
	// volume shared by several machines, a pid and start time mean
	// nothing on another kernel: reaping checks both (procs.ReapRecord).
	Member string
	Boot   string
}

// procHeader is the first line of a process record, version included;
// v2 adds the member and the boot id, and is written only when one of
// them is set, so a daemon outside a cluster writes v1 as before.
const (
	procHeader   = "meshweaver-proc v1"
	procHeaderV2 = "meshweaver-proc v2"
)

// maxIdentityLen bounds ProcRecord.Member and Boot.
const maxIdentityLen = 128

// maxExeLen bounds ProcRecord.Exe.
const maxExeLen = 4096

// maxProcRecord bounds how much of a process record is read.
const maxProcRecord = maxExeLen + 256

// WriteProcRecord stores rec at path atomically, mode 0600:
//
//	meshweaver-proc v1
//	pid <decimal>
//	start <decimal>
//	exe <path>
//
// each line ending in a newline, nothing else; with a Member or a Boot,
// "meshweaver-proc v2" and the lines "member <id>" and "boot <id>" before
// exe. PID must be above 1, StartTime above 0, Exe at most 4096 bytes
// without NUL or newline, Member and Boot at most 128 bytes without
// white space or control characters.
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
	for _, f := range []struct{ name, v string }{{"member", rec.Member}, {"boot", rec.Boot}} {
		if len(f.v) > maxIdentityLen {
			return fmt.Errorf("%s is %d bytes, longer than %d", f.name, len(f.v), maxIdentityLen)
		}
		for _, c := range []byte(f.v) {
			if c <= ' ' || c == 0x7f {
				return fmt.Errorf("%s contains white space or a control character", f.name)
			}
		}
	}
	return nil
}

func formatProcRecord(rec ProcRecord) []byte {
	if rec.Member != "" || rec.Boot != "" {
		return formatFields(procHeaderV2,
			"pid", strconv.Itoa(rec.PID),
			"start", strconv.FormatUint(rec.StartTime, 10),
			"member", rec.Member,
			"boot", rec.Boot,
			"exe", rec.Exe)
	}
	return formatFields(procHeader,
		"pid", strconv.Itoa(rec.PID),
		"start", strconv.FormatUint(rec.StartTime, 10),
		"exe", rec.Exe)
}

func parseProcRecord(data []byte) (ProcRecord, error) {
	var v []string
	var err error
	if bytes.HasPrefix(data, []byte(procHeaderV2+"\n")) {
		v, err = parseFields(data, procHeaderV2, "pid", "start", "member", "boot", "exe")
		if err == nil {
			v = []string{v[0], v[1], v[4], v[2], v[3]}
		}
	} else {
		v, err = parseFields(data, procHeader, "pid", "start", "exe")
		if err == nil {
			v = append(v, "", "")
		}
	}
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
	rec := ProcRecord{PID: pid, StartTime: start, Exe: v[2], Member: v[3], Boot: v[4]}
	if err := validateProcRecord(rec); err != nil {
		return ProcRecord{}, corruptf("%v", err)
	}
	// Only the canonical spelling ("+7" or "007" is not) round-trips.
	if !bytes.Equal(formatProcRecord(rec), data) {
		return ProcRecord{}, corruptf("numbers not in canonical form")
	}
	return rec, nil
}
