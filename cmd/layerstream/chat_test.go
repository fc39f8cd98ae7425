package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/brokenmodel"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/internal/testutil"
)

func openChatModel(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), testutil.ChatModel(t), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestChat: a conversation of several turns, a multi-line message, /history, /system and /reset; the second
// turn reuses the first one's keys and values.
func TestChat(t *testing.T) {
	e := openChatModel(t)
	var logs testutil.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	in := strings.Join([]string{
		"Once upon a time",
		`"""There was`,
		`a dog"""`,
		"/history",
		"/system Be kind.",
		"/history",
		"Tom and \\",
		"Sue",
		"/nope",
		"/exit",
		"never read",
	}, "\n") + "\n"
	var out, msg testutil.SyncBuffer
	o := generateOptions{model: "the-model", maxNew: 12, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	if err := runChat(context.Background(), e, o, chatIO{in: strings.NewReader(in), out: &out, msg: &msg, interrupts: make(chan os.Signal)}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg.String(), "Chatting with the-model.") {
		t.Errorf("the greeting names another model than --model's: %q", msg.String())
	}
	text := out.String()
	if !strings.Contains(text, "[user] Once upon a time\n[assistant] ") || !strings.Contains(text, "[user] There was\na dog\n") {
		t.Errorf("history:\n%s", text)
	}
	if n := strings.Count(text, "[user]"); n != 2 {
		t.Errorf("%d user turns in the histories printed, want 2 (the second /history after /system is empty but for the system message):\n%s", n, text)
	}
	if !strings.Contains(text, "[system] Be kind.") {
		t.Errorf("/system: %s", text)
	}
	if !strings.Contains(msg.String(), "unknown command /nope") || strings.Contains(text, "never read") {
		t.Errorf("messages %q", msg.String())
	}
	// Turn 2 reused turn 1's cache; turn 3 (after /system) started afresh.
	var reused []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "msg=turn") {
			_, r, _ := strings.Cut(l, "reused=")
			reused = append(reused, strings.Fields(r)[0])
		}
	}
	if len(reused) != 3 || reused[0] != "0" || reused[1] == "0" || reused[2] != "0" {
		t.Errorf("prompt tokens reused per turn: %v, want 0, >0, 0", reused)
	}
}

// TestChatInterrupt: Ctrl-C during an answer stops it and the chat goes on; at the prompt it only reminds how
// to leave.
func TestChatInterrupt(t *testing.T) {
	e := openChatModel(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	interrupts := make(chan os.Signal, 1)
	var msg testutil.SyncBuffer
	o := generateOptions{maxNew: 400, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	done := make(chan error, 1)
	go func() {
		done <- runChat(context.Background(), e, o, chatIO{in: inR, out: outW, msg: &msg, interrupts: interrupts})
		outW.Close()
	}()
	out := bufio.NewReader(outR)
	go inW.Write([]byte("Once upon a time\n"))
	// The answer streams into the pipe, which holds each piece until it is read: read one, then press Ctrl-C.
	if _, err := out.ReadString(' '); err != nil {
		t.Fatal(err)
	}
	interrupts <- os.Interrupt
	rest, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if words := len(strings.Fields(rest)); words > 20 {
		t.Errorf("%d more words after Ctrl-C", words)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(msg.String(), "(stopped)") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// Ctrl-C at the prompt, then another turn, then Ctrl-D.
	interrupts <- os.Interrupt
	for !strings.Contains(msg.String(), "Ctrl-D or /exit") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	go func() {
		inW.Write([]byte("/history\n"))
		inW.Close()
	}()
	tail, _ := io.ReadAll(out)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg.String(), "(stopped)") || !strings.Contains(msg.String(), "Ctrl-D or /exit") || !strings.Contains(string(tail), "[assistant] ") {
		t.Errorf("messages %q, tail %q", msg.String(), tail)
	}
}

// TestChatTerminated: SIGTERM (the context cancelled), at the prompt or during an answer, ends the chat with
// context.Canceled, which the command turns into exit status 130, as every command's; input that ends inside a
// message of several lines says that message was not sent.
func TestChatTerminated(t *testing.T) {
	e := openChatModel(t)
	o := generateOptions{maxNew: 400, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	for _, during := range []string{"the prompt", "an answer"} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		var msg testutil.SyncBuffer
		done := make(chan error, 1)
		go func() {
			done <- runChat(ctx, e, o, chatIO{in: inR, out: outW, msg: &msg, interrupts: make(chan os.Signal)})
			outW.Close()
		}()
		out := bufio.NewReader(outR)
		if during == "an answer" {
			go inW.Write([]byte("Once upon a time\n"))
			if _, err := out.ReadString(' '); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		go io.Copy(io.Discard, out)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("SIGTERM during %s: %v, want context.Canceled (exit status 130)", during, err)
		}
		inW.Close()
	}
	var out, msg testutil.SyncBuffer
	err := runChat(context.Background(), e, o, chatIO{in: strings.NewReader("\"\"\"Once upon\na time\n"), out: &out, msg: &msg, interrupts: make(chan os.Signal)})
	if err != nil || !strings.Contains(msg.String(), "it was not sent") {
		t.Errorf("input ending inside a block: %v, messages %q", err, msg.String())
	}
}

// Each chat turn has its own health checks: without --strict a degenerate answer is a warning naming its turn;
// with --strict the answer stops with the problem and its section, is forgotten, and the chat goes on.
func TestChatHealthChecks(t *testing.T) {
	e, err := engine.Open(context.Background(), brokenmodel.Echo(t), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var logs testutil.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(old)
	in := "Hi\nHello\n/history\n/exit\n"
	for _, strict := range []bool{false, true} {
		var out, msg testutil.SyncBuffer
		o := generateOptions{maxNew: 24, strict: strict, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
		if err := runChat(context.Background(), e, o, chatIO{in: strings.NewReader(in), out: &out, msg: &msg, interrupts: make(chan os.Signal)}); err != nil {
			t.Fatalf("strict %v: %v", strict, err)
		}
		anchor := sections.Anchor(sections.Saturation)
		if !strict {
			for turn := 1; turn <= 2; turn++ {
				if n := strings.Count(logs.String(), "turn="+strconv.Itoa(turn)+" kind=saturation step=7 see="+anchor); n != 1 {
					t.Errorf("turn %d: %d saturation warnings naming it, want 1:\n%s", turn, n, logs.String())
				}
			}
			if strings.Count(out.String(), "[assistant]") != 2 {
				t.Errorf("without --strict both answers stay:\n%s", out.String())
			}
			continue
		}
		if n := strings.Count(msg.String(), "the answer was stopped: "); n != 2 || !strings.Contains(msg.String(), anchor) {
			t.Errorf("--strict: messages %q; want both answers stopped, naming %s", msg.String(), anchor)
		}
		if strings.Contains(out.String(), "[assistant]") || strings.Count(out.String(), "[user]") != 0 {
			t.Errorf("--strict: the stopped answers stay in the history:\n%s", out.String())
		}
	}
}

// TestChatMessage: the lines typed make messages as chatHelp says: one line; lines between """ lines (the first
// and the last may carry text); """text""" on one line; lines ending with a backslash continued by the next.
func TestChatMessage(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  []string // the messages completed, in order
		open  bool     // a message begun and not ended after the last line
	}{
		{[]string{"hello"}, []string{"hello"}, false},
		{[]string{`"""`, "one", "two", `"""`}, []string{"one\ntwo"}, false},
		{[]string{`"""There was`, `a dog"""`, "next"}, []string{"There was\na dog", "next"}, false},
		{[]string{`"""all in one"""`}, []string{"all in one"}, false},
		{[]string{`first \`, `second \`, "third"}, []string{"first \nsecond \nthird"}, false},
		{[]string{`"""`, "not closed"}, nil, true},
		{[]string{`ends with \`}, nil, true},
		{[]string{"  ", "x"}, []string{"", "x"}, false},
	} {
		var m message
		var got []string
		for _, l := range c.lines {
			if text, done := m.add(l); done {
				got = append(got, text)
			}
		}
		if !slices.Equal(got, c.want) || m.open() != c.open {
			t.Errorf("lines %q: messages %q, open %v; want %q, open %v", c.lines, got, m.open(), c.want, c.open)
		}
	}
}
