//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestHelperLayerstream is not a test: run as a separate process by TestInterruptKeepsTheResult, it runs the
// command line in $LAYERSTREAM_HELPER_ARGS (separated by newlines) and exits with its status.
func TestHelperLayerstream(t *testing.T) {
	args := os.Getenv("LAYERSTREAM_HELPER_ARGS")
	if args == "" {
		t.Skip("helper process only")
	}
	os.Exit(run(strings.Split(args, "\n"), os.Stdout, os.Stderr))
}

// Issue #13 case 8: Ctrl-C (SIGINT) during generate --json prints the result so far with stop_reason
// "cancelled"; in text mode what was printed stays. Both exit with status 130.
func TestInterruptKeepsTheResult(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a model for a few seconds")
	}
	tok := testutil.SharedPath(t, "models", "tokenizers", "qwen3", "tokenizer.json") // covers SmolLM2's 49152 ids
	model := filepath.Join(t.TempDir(), "m")
	var out, errb bytes.Buffer
	if code := run([]string{"synth", "--shape", "smollm2-135m", "--layers", "2", "--seed", "5", "--tokenizer", tok, "--out", model}, &out, &errb); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errb.String())
	}
	shardDir := filepath.Join(t.TempDir(), "shards")
	if code := run([]string{"split", model, "--out", shardDir, "-q"}, &out, &errb); code != 0 {
		t.Fatalf("split: exit %d: %s", code, errb.String())
	}
	interrupted := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLayerstream$")
		cmd.Env = append(os.Environ(), "LAYERSTREAM_HELPER_ARGS="+strings.Join(append([]string{"generate", "--model", shardDir,
			"--prompt", "Once upon a time", "--max-new-tokens", "1800", "--temperature", "0", "-v"}, args...), "\n"))
		var o bytes.Buffer
		e := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = &o, e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// -v logs the sampling settings just before generating: wait for it (however busy the machine is), then
		// let some tokens come (50-100 a second here, 1800 to go).
		for deadline := time.Now().Add(time.Minute); !strings.Contains(e.String(), "msg=sampling") && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Second)
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		return code, o.String(), e.String()
	}

	code, stdout, stderr := interrupted("--json")
	var g generateJSON
	if err := json.Unmarshal([]byte(stdout), &g); err != nil {
		t.Fatalf("--json after SIGINT: exit %d, stdout %q (%v), stderr %s", code, stdout, err, stderr)
	}
	if code != 130 || g.StopReason != "cancelled" || len(g.GeneratedIDs) == 0 || len(g.GeneratedIDs) >= 1800 {
		t.Errorf("--json after SIGINT: exit %d, stop_reason %q, %d tokens; want 130, \"cancelled\" and the tokens so far", code, g.StopReason, len(g.GeneratedIDs))
	}

	code, stdout, stderr = interrupted()
	if code != 130 || !strings.HasPrefix(stdout, "Once upon a time") || len(stdout) < len("Once upon a time")+5 {
		t.Errorf("text mode after SIGINT: exit %d, stdout %q; want 130 and the text printed so far", code, stdout)
	}
	if !strings.Contains(stderr, "layerstream generate: interrupted (interrupt signal received)") {
		t.Errorf("text mode after SIGINT: stderr does not say it was interrupted: %s", stderr)
	}
}

// Issue #36 case 4: a second SIGTERM while serve drains (a request holding it, with a long --shutdown-timeout)
// ends the process at once, with status 130.
func TestServeSecondSignalExits(t *testing.T) {
	model := testutil.ChatModel(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLayerstream$")
	cmd.Env = append(os.Environ(), "LAYERSTREAM_HELPER_ARGS="+strings.Join([]string{"serve", "--model", model, "--port", "0", "--shutdown-timeout", "2m"}, "\n"))
	e := &testutil.SyncBuffer{}
	cmd.Stderr = e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitFor := func(what string) string {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if s := e.String(); strings.Contains(s, what) {
				return s
			}
		}
		t.Fatalf("serve did not say %q: %s", what, e.String())
		return ""
	}
	_, rest, _ := strings.Cut(waitFor("/v1 (OpenAI)"), " at http://")
	addr, _, _ := strings.Cut(rest, "/v1")
	// A request whose headers are not all sent yet holds the graceful shutdown (for some seconds: net/http's
	// Shutdown waits that long for a new connection to send its request).
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\n", addr)
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	waitFor("shutting down")
	select {
	case err := <-exited:
		t.Fatalf("serve exited before the request held it: %v: %s", err, e.String())
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 130 || !strings.Contains(e.String(), "second signal") {
			t.Errorf("after a second SIGTERM: %v; want exit status 130 saying so: %s", err, e.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("serve still draining 5 s after a second SIGTERM: %s", e.String())
	}
}
