package hub

import (
	"context"
	"fmt"
	"os"
	"time"
)

// lockPoll is how often a waiting process retries a held lock (a non-blocking flock, so ctx can cancel it).
const lockPoll = 50 * time.Millisecond

// lockFile takes an exclusive flock on path, creating it, and returns the function that releases it. onWait
// runs once if another process (or goroutine) holds the lock. With remove, the holder deletes the file before
// unlocking, and a waiter that then locks the old, unlinked file notices and locks the new one instead; without
// it the file stays, as Python's filelock leaves its lock files.
func lockFile(ctx context.Context, path string, remove bool, onWait func()) (unlock func(), err error) {
	waited := false
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		for {
			locked, err := tryLock(f)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			if locked {
				break
			}
			if !waited && onWait != nil {
				onWait()
				waited = true
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, ctx.Err()
			case <-time.After(lockPoll):
			}
		}
		held, herr := f.Stat()
		cur, cerr := os.Stat(path)
		if herr == nil && cerr == nil && os.SameFile(held, cur) {
			return func() {
				if remove {
					os.Remove(path)
				}
				f.Close()
			}, nil
		}
		f.Close()
	}
}

// freeSpace returns the bytes available to this user on dir's file system; a variable so tests can fake a full disk.
var freeSpace = statfsFree
