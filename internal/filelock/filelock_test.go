package filelock

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestHelperHoldLock is not a test: run by TestDeadHolderDoesNotBlock as a separate process, it takes the lock
// named by $FILELOCK_HOLD, says so, and waits to be killed.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv("FILELOCK_HOLD")
	if path == "" {
		t.Skip("helper process only")
	}
	if _, err := Lock(context.Background(), path, false, nil); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
}

// A lock held by a process that dies (SIGKILL: no cleanup runs) is free at once for the next one.
func TestDeadHolderDoesNotBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "FILELOCK_HOLD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		cmd.Process.Kill()
		t.Fatalf("helper: %q, %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = Lock(ctx, path, false, nil)
	cancel()
	if err == nil {
		t.Fatal("locked while the helper holds the lock")
	}
	cmd.Process.Kill()
	cmd.Wait()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	unlock, err := Lock(ctx, path, false, nil)
	if err != nil {
		t.Fatalf("the dead holder's lock still blocks: %v", err)
	}
	unlock()
}

// A second locker waits (onWait runs once) until the first unlocks; with remove the file is gone afterwards.
func TestWaitAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "y.lock")
	unlock, err := Lock(context.Background(), path, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits := 0
	got := make(chan func())
	go func() {
		u, err := Lock(context.Background(), path, true, func() { waits++ })
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("second Lock did not wait")
	case <-time.After(3 * poll):
	}
	unlock()
	u := <-got
	if waits != 1 {
		t.Errorf("onWait ran %d times, want 1", waits)
	}
	u()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("lock file left behind: %v", err)
	}
}
