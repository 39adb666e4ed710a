package contain

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"

	"github.com/docker/go-units"
)

// Limits is what one user may use. Zero means no limit.
type Limits struct {
	// Memory bounds memory and swap together, in bytes; the user's tmpfs
	// pages (the sandbox's /tmp) are charged to it.
	Memory int64
	// Pids bounds processes and threads.
	Pids int64
	// CPU bounds CPU time in cores (1.5: one and a half cores' worth of
	// each period).
	CPU float64
	// Disk bounds what the user's home holds, in bytes.
	Disk int64
}

// Any reports whether some cgroup limit is set (Disk is not one).
func (l Limits) Any() bool { return l.Memory > 0 || l.Pids > 0 || l.CPU > 0 }

func (l Limits) String() string {
	return fmt.Sprintf("memory=%s pids=%s cpu=%s disk=%s", FormatSize(l.Memory), formatCount(l.Pids), FormatCPU(l.CPU), FormatSize(l.Disk))
}

// FormatSize writes a size the way ParseSize reads it ("512MiB"; "max"
// for 0).
func FormatSize(n int64) string {
	if n <= 0 {
		return "max"
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// FormatCPU writes cores the way ParseCPU reads them ("max" for 0).
func FormatCPU(c float64) string {
	if c <= 0 {
		return "max"
	}
	return strconv.FormatFloat(c, 'f', -1, 64)
}

func formatCount(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

// unlimited reports the words that mean no limit.
func unlimited(s string) bool { return s == "0" || s == "max" || s == "off" }

// ParseSize reads a size: a number of bytes, or a number with an IEC
// suffix (KiB, MiB, GiB, TiB; K, M, G, T mean the same), fractions
// allowed ("1.5GiB"). "0", "max" and "off" mean no limit (0). SI
// suffixes (MB, GB) are refused: a limit off by 5% is a surprise.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if unlimited(s) {
		return 0, nil
	}
	upper := strings.ToUpper(s)
	if strings.HasSuffix(upper, "B") && !strings.HasSuffix(upper, "IB") {
		return 0, fmt.Errorf("size %q: use IEC units (KiB, MiB, GiB, TiB)", s)
	}
	n, err := units.RAMInBytes(s) // binary units, with or without "iB"
	if err != nil {
		return 0, fmt.Errorf("size %q: not a number with KiB, MiB, GiB or TiB", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	return n, nil
}

// ParseCPU reads cores: a positive number, fractions allowed ("0.5").
// "0", "max" and "off" mean no limit.
func ParseCPU(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if unlimited(s) {
		return 0, nil
	}
	c, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(c) || math.IsInf(c, 0) || c <= 0 {
		return 0, fmt.Errorf("cpu %q: not a positive number of cores", s)
	}
	if c < 0.01 {
		return 0, fmt.Errorf("cpu %q: below 0.01 cores, which starves a CLI", s)
	}
	return c, nil
}

// ParseCount reads a process count; "0", "max" and "off" mean no limit.
func ParseCount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if unlimited(s) {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count %q: not a whole number", s)
	}
	return n, nil
}

// Defaults are the limits of a node whose operator set none: a quarter of
// the node's memory, half its cores (at least one), 1024 processes. They
// keep one runaway round from taking the node; an operator sizes them to
// the users (docs/OPERATIONS.md).
func Defaults() Limits {
	l := Limits{Pids: 1024, CPU: math.Max(1, float64(runtime.NumCPU())/2)}
	if total, err := memTotal(); err == nil {
		l.Memory = total / 4 &^ (1<<20 - 1) // whole MiB, as the log says it
	}
	return l
}

// ErrNoLimits is returned where limits are asked of a node that has none.
var ErrNoLimits = errors.New("no limits")
