package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFileAtomic replaces the file at path with data and the permission
// bits perm, so that readers see either the old or the new content, never a
// mix. Missing parent directories are created with mode 0700. The data is
// written to a temporary file in the same directory, synced, renamed over
// path, and the directory is synced. On error no temporary file is left
// behind and the previous content of path is untouched.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := writeFileAtomic(path, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return errors.New("no file name")
	}
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// CreateTemp opens with mode 0600, so the content is never readable
	// by others before the chmod below narrows or widens it to perm.
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. File systems that cannot sync a
// directory (EINVAL) are tolerated: there is nothing more to be done.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its times: for an append, one journal commit instead of two.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
