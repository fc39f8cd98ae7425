//go:build !linux

package shards

import (
	"errors"
	"os"
)

// errNoMap reports that shard files cannot be mapped here.
var errNoMap = errors.New("mapping shard files is implemented on Linux only")

func mapFile(*os.File, int64) ([]byte, error) { return nil, errNoMap }

func unmapFile([]byte) error { return nil }

func adviseHugePages([]byte) {}

func faultIn([]byte) {}
