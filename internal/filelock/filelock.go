// Package filelock is an exclusive, advisory, cross-process file lock (flock on Unix, LockFileEx on Windows)
// that a waiting process can cancel. The operating system releases it when its holder exits, however it exits,
// so a lock left by a killed process never blocks anyone.
package filelock

import (
	"context"
	"fmt"
	"os"
	"time"
)

// poll is how often a waiting process retries a held lock (a non-blocking lock, so ctx can cancel the wait).
const poll = 50 * time.Millisecond

// Lock takes an exclusive lock on path, creating the file, and returns the function that releases it. onWait
// (which may be nil) runs once if another process (or goroutine) holds the lock. With remove, the holder deletes
// the file before unlocking, and a waiter that then locks the old, unlinked file notices and locks the new one
// instead; without it the file stays, as Python's filelock leaves its lock files.
func Lock(ctx context.Context, path string, remove bool, onWait func()) (unlock func(), err error) {
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
			case <-time.After(poll):
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
