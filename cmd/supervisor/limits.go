package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/contain"
)

// limitOptions are the serve flags that bound each user's share of the
// node (package contain; docs/OPERATIONS.md, "Per-user limits").
type limitOptions struct {
	memory, pids, cpu, disk string
	minFreeDisk             string
	cgroupParent            string
	cgroupVersion           string
}

func (o *limitOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.memory, "user-memory-max", "auto", "`SIZE` of memory and swap each user's app-server and all it runs may hold (IEC: 512MiB, 2GiB); auto: a quarter of the node's memory; 0 or max: no limit")
	fs.StringVar(&o.pids, "user-pids-max", "auto", "`N` processes and threads each user may run; auto: 1024; 0 or max: no limit")
	fs.StringVar(&o.cpu, "user-cpu-max", "auto", "`CORES` of CPU each user may use (fractions allowed: 0.5); auto: half the node's cores, at least 1; 0 or max: no limit")
	fs.StringVar(&o.disk, "user-disk-max", "0", "`SIZE` each user's home may hold: a project quota where the homes' filesystem enforces them (ext4 with quota,project mounted prjquota, or XFS with prjquota) and bubblewrap runs, else a filesystem image of the user's own (needs root, loop devices and mkfs.ext4); 0: no limit")
	fs.StringVar(&o.minFreeDisk, "min-free-disk", "64MiB", "`SIZE` the file system of the homes (where the daemon keeps its records: journals, thread records, ledgers) must have free for a round to start; under it rounds are refused with resource_limit disk before any agent can fill what the records need; 0: no floor")
	fs.StringVar(&o.cgroupParent, "cgroup-parent", "", "cgroup `PATH` the users' cgroups go under (default: the daemon's own); relative to the cgroup2 mount, or to each v1 hierarchy's root")
	fs.StringVar(&o.cgroupVersion, "cgroup-version", "auto", "cgroup hierarchy the limits use: 1, 2, or auto to detect it")
}

// parsed reads the limits; explicit names the ones the operator set
// (not auto), which the host must then enforce.
func (o *limitOptions) parsed() (l contain.Limits, explicit []string, err error) {
	def := contain.Defaults()
	var errs []error
	read := func(name, flagName, v string, parse func(string) error) {
		if v == "auto" {
			return
		}
		explicit = append(explicit, name)
		if err := parse(v); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flagName, err))
		}
	}
	l = def
	read("memory", "user-memory-max", o.memory, func(s string) (err error) { l.Memory, err = contain.ParseSize(s); return })
	read("pids", "user-pids-max", o.pids, func(s string) (err error) { l.Pids, err = contain.ParseCount(s); return })
	read("cpu", "user-cpu-max", o.cpu, func(s string) (err error) { l.CPU, err = contain.ParseCPU(s); return })
	l.Disk = 0
	if o.disk != "auto" {
		if o.disk != "0" && o.disk != "max" && o.disk != "off" {
			explicit = append(explicit, "disk")
		}
		var err error
		if l.Disk, err = contain.ParseSize(o.disk); err != nil {
			errs = append(errs, fmt.Errorf("--user-disk-max: %w", err))
		}
	}
	if l.Memory > 0 && l.Memory < 64<<20 {
		errs = append(errs, fmt.Errorf("--user-memory-max %s is below 64MiB: a codex CLI does not start in it", contain.FormatSize(l.Memory)))
	}
	if l.Pids > 0 && l.Pids < 32 {
		errs = append(errs, fmt.Errorf("--user-pids-max %d is below 32: a codex CLI's threads alone need more", l.Pids))
	}
	if _, err := o.version(); err != nil {
		errs = append(errs, err)
	}
	return l, explicit, errors.Join(errs...)
}

// version is --cgroup-version as contain.Options wants it (0: detect).
func (o *limitOptions) version() (int, error) {
	switch o.cgroupVersion {
	case "auto", "":
		return 0, nil
	case "1":
		return 1, nil
	case "2":
		return 2, nil
	}
	return 0, fmt.Errorf("--cgroup-version %q is not 1, 2 or auto", o.cgroupVersion)
}

// freeFloor is --min-free-disk in bytes.
func (o *limitOptions) freeFloor() (int64, error) {
	if o.minFreeDisk == "0" {
		return 0, nil
	}
	n, err := contain.ParseSize(o.minFreeDisk)
	if err != nil {
		return 0, fmt.Errorf("--min-free-disk: %w", err)
	}
	return n, nil
}

func (o *limitOptions) validate() error {
	if _, err := o.freeFloor(); err != nil {
		return err
	}
	_, _, err := o.parsed()
	return err
}

// cgroupName is this daemon's folder under the cgroup parent: stable for
// its homes and member, so a restart finds what a killed one left, and
// apart for two daemons on one host.
func cgroupName(homes, member string) string {
	abs, err := filepath.Abs(homes)
	if err != nil {
		abs = homes
	}
	sum := sha256.Sum256([]byte(abs + "\x00" + member))
	return "meshweaver-" + hex.EncodeToString(sum[:6])
}

func (o *limitOptions) contain(homes, member string, l contain.Limits) contain.Options {
	v, _ := o.version() // validated
	return contain.Options{Version: v, Parent: o.cgroupParent, Name: cgroupName(homes, member), Limits: l}
}

// check says, without changing anything, what the host would enforce;
// an error names each limit the operator set that it cannot. disk says
// how homes would be bounded ("" with no disk limit). userns says the
// users' agents will run in user namespaces of their own (bubblewrap on).
func (o *limitOptions) check(homes, member string, userns bool) (rep contain.Report, disk string, err error) {
	l, explicit, err := o.parsed()
	if err != nil {
		return contain.Report{}, "", err
	}
	rep = contain.Probe(o.contain(homes, member, l))
	var errs []error
	for _, r := range explicit {
		if why, ok := rep.Missing[r]; ok {
			errs = append(errs, fmt.Errorf("--user-%s-max is set but this host cannot enforce it: %s", r, why))
		}
	}
	if l.Disk > 0 {
		qerr := contain.ProjectQuotas(homes)
		if qerr == nil && !userns {
			qerr = errors.New("the users' agents would not run in user namespaces of their own (bubblewrap off)")
		}
		if qerr == nil {
			disk = "project quota"
		} else if _, err := contain.OpenDisk(l.Disk); err != nil {
			errs = append(errs, fmt.Errorf("--user-disk-max: no project quotas (%v), and %w", qerr, err))
		} else {
			disk = fmt.Sprintf("image (no project quotas: %v)", qerr)
		}
	}
	return rep, disk, errors.Join(errs...)
}

// open readies the users' limits at start: the daemon's own OOM score,
// its cgroup folder (with what a killed daemon left there emptied), the
// disk bound (project quotas when userns: the users' agents run in user
// namespaces of their own; else images). A limit the operator set that
// the host cannot enforce refuses the start; a default one is a warning.
func (o *limitOptions) open(homes, member string, userns bool, log *slog.Logger) (*contain.Node, *contain.Disk, error) {
	l, explicit, err := o.parsed()
	if err != nil {
		return nil, nil, err
	}
	if err := contain.ProtectSelf(); err != nil {
		log.Warn("the daemon is not protected from the OOM killer", "err", err)
	}
	n, err := contain.Open(o.contain(homes, member, l))
	if err != nil {
		return nil, nil, err
	}
	rep := n.Report()
	var refused []string
	for r, why := range rep.Missing {
		if contains(explicit, r) {
			refused = append(refused, fmt.Sprintf("--user-%s-max: %s", r, why))
		} else {
			log.Warn("a user limit is not enforced on this host", "limit", r, "why", why)
		}
	}
	if len(refused) > 0 {
		return nil, nil, fmt.Errorf("user limits this host cannot enforce: %s", strings.Join(refused, "; "))
	}
	disk, err := contain.OpenDiskOn(homes, l.Disk, userns)
	if err != nil {
		return nil, nil, fmt.Errorf("--user-disk-max: %w", err)
	}
	if why := disk.NoQuota(); why != nil {
		log.Info("the homes are bounded by images, not project quotas", "why", why)
	}
	if n.Active() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if found, err := n.Sweep(ctx); err != nil {
			log.Warn("emptying the user cgroups a previous instance left", "err", err)
		} else if found > 0 {
			log.Warn("emptied the user cgroups a previous instance left", "count", found)
		}
	}
	enforced := append([]string{}, rep.Enforced...)
	if l.Disk > 0 {
		enforced = append(enforced, "disk")
	}
	if len(enforced) == 0 {
		log.Warn("no per-user limits: one user's agent can take this node's memory, processes, CPU and disk")
	} else {
		log.Info("user limits", "enforced", strings.Join(enforced, ","), "cgroup", rep.Version, "path", rep.Path,
			"memory", contain.FormatSize(l.Memory), "pids", l.Pids, "cpu", contain.FormatCPU(l.CPU), "disk", contain.FormatSize(l.Disk), "disk_bound", disk.Kind())
	}
	return n, disk, nil
}

// reload applies changed limits to every live user (SIGHUP). The disk's
// size changes with project quotas (one quotactl a home); an image is
// resized by a restart.
func (o *limitOptions) reload(n *contain.Node, disk *contain.Disk, log *slog.Logger) {
	l, _, err := o.parsed()
	if err != nil {
		return // validated by the reload before
	}
	if l.Disk != disk.Size() {
		if err := disk.SetSize(l.Disk); err != nil {
			log.Warn("the disk limit is not changed", "disk", contain.FormatSize(l.Disk), "err", err)
		} else {
			log.Info("user disk limit reloaded", "disk", contain.FormatSize(l.Disk))
		}
	}
	if !n.Active() {
		return
	}
	if l.Disk = n.Limits().Disk; l == n.Limits() {
		return
	}
	if err := n.SetLimits(l); err != nil {
		log.Error("applying the user limits", "err", err)
		return
	}
	log.Info("user limits reloaded", "memory", contain.FormatSize(l.Memory), "pids", l.Pids, "cpu", contain.FormatCPU(l.CPU))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// describeEnforced is a Report and the disk bound in a line for serve
// --check.
func describeEnforced(rep contain.Report, disk string) string {
	var parts []string
	if len(rep.Enforced) > 0 {
		parts = append(parts, fmt.Sprintf("%s (cgroup v%d)", strings.Join(rep.Enforced, ", "), rep.Version))
	}
	if disk != "" {
		parts = append(parts, "disk by "+disk)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
