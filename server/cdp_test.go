package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// browser drives headless Chromium over the DevTools protocol through --remote-debugging-pipe (fds 3 and 4,
// messages ended by NUL): no WebSocket, no dependency, real time (the page's streams run as they would).
type browser struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	id      int
	session string
}

// openBrowser starts Chromium on url, attached to its page; it is closed when the test ends.
func openBrowser(t *testing.T, path, url string) *browser {
	t.Helper()
	cmdIn, in, err := os.Pipe() // Chromium reads commands from fd 3
	if err != nil {
		t.Fatal(err)
	}
	out, cmdOut, err := os.Pipe() // and writes answers and events to fd 4
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--remote-debugging-pipe", "--window-size=1400,900", "--user-data-dir="+t.TempDir(), url)
	cmd.ExtraFiles = []*os.File{cmdIn, cmdOut}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmdIn.Close()
	cmdOut.Close()
	b := &browser{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		b.call("Browser.close", nil)
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", stderr.String())
		}
	})
	var targets struct {
		TargetInfos []struct{ TargetID, Type string } `json:"targetInfos"`
	}
	var target string
	for deadline := time.Now().Add(30 * time.Second); target == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := b.call("Target.getTargets", nil, &targets); err != nil {
			t.Fatalf("chromium: %v\n%s", err, stderr.String())
		}
		for _, ti := range targets.TargetInfos {
			if ti.Type == "page" {
				target = ti.TargetID
			}
		}
	}
	var attached struct{ SessionID string }
	if err := b.call("Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &attached); err != nil {
		t.Fatalf("attach to the page: %v", err)
	}
	b.session = attached.SessionID
	return b
}

// call sends a command (to the page once attached) and decodes its result into res (when not nil), skipping
// the events that come in between.
func (b *browser) call(method string, params any, res ...any) error {
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if params == nil {
		msg["params"] = map[string]any{}
	}
	if b.session != "" && !strings.HasPrefix(method, "Target.") && !strings.HasPrefix(method, "Browser.") {
		msg["sessionId"] = b.session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.in.Write(append(raw, 0)); err != nil {
		return err
	}
	for {
		line, err := b.out.ReadBytes(0)
		if err != nil {
			return err
		}
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if json.Unmarshal(line[:len(line)-1], &r) != nil || r.ID != b.id {
			continue
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		if len(res) > 0 {
			return json.Unmarshal(r.Result, res[0])
		}
		return nil
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value into v.
func (b *browser) eval(expr string, v any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct{ Text string } `json:"exceptionDetails"`
	}
	if err := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return errors.New(r.ExceptionDetails.Text)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// waitFor evaluates expr (a boolean) every 50 ms until it holds, or fails the test after timeout.
func (b *browser) waitFor(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	for {
		var ok bool
		if err := b.eval(expr, &ok); err == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page never got to %s", expr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// screenshot saves a PNG of the page.
func (b *browser) screenshot(path string) error {
	var r struct{ Data string }
	if err := b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}
