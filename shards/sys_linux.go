package shards

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// errNoDirectIO reports that O_DIRECT is not available.
var errNoDirectIO = errors.New("O_DIRECT not supported")

// openDirect opens path for reading with O_DIRECT.
func openDirect(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
}

// reopenName is a name that opens f's file itself, wherever it has been renamed or replaced since it was opened:
// its descriptor's entry in /proc.
func reopenName(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// freeBytes returns the bytes available to unprivileged users on dir's filesystem.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// changeTime returns the file's status-change time (ctime) in nanoseconds: unlike the modification time, no
// program can set it back.
func changeTime(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ctim.Nano()
	}
	return 0
}

// fileID returns the file's device and inode numbers.
func fileID(st os.FileInfo) (dev, ino uint64) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Dev), s.Ino
	}
	return 0, 0
}
