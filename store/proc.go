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
}

// procHeader is the first line of a process record, version included.
const procHeader = "meshweaver-proc v1"

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
