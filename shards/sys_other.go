//go:build !linux

package shards

import (
	"errors"
	"os"
)

// errNoDirectIO reports that O_DIRECT is not available.
var errNoDirectIO = errors.New("O_DIRECT not supported on this platform")

func openDirect(string) (*os.File, error) { return nil, errNoDirectIO }

// reopenName is a name that opens f's file: its path here, where O_DIRECT is not used anyway.
func reopenName(f *os.File) string { return f.Name() }

// freeBytes returns -1 (unknown): the free-space check is skipped on this platform.
func freeBytes(string) (int64, error) { return -1, nil }

// changeTime returns 0: VerifyOnce compares device, inode, size and modification time only.
func changeTime(os.FileInfo) int64 { return 0 }

// fileID returns 0, 0: a split's source record compares size and times only on this platform.
func fileID(os.FileInfo) (dev, ino uint64) { return 0, 0 }
