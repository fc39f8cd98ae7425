package hub

import (
	"fmt"

	"golang.org/x/sys/windows"
)

func statfsFree(dir string) (int64, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	var free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, nil, nil); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return int64(free), nil
}
