package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/progress"
	"github.com/layerstream/layerstream/tokenizer"
)

func init() {
	register(command{
		name:          "chat",
		summary:       "chat with a model in the terminal (history, system prompt, streaming; Ctrl-C stops an answer)",
		usage:         "--model MODEL",
		ownsInterrupt: true,
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o generateOptions
			fs.StringVar(&o.model, "model", "", modelFlagHelp)
			fs.StringVar(&o.system, "system", "", "system message (also /system TEXT)")
			fs.IntVar(&o.maxNew, "max-new-tokens", 1024, "most tokens of one answer (0: until the context is full)")
			fs.BoolVar(&o.strict, "strict", false, "stop an answer with an error when a guard detects broken output (activations out of range, all-zero logits, degenerate repetition); without it they are warnings")
			addSamplingFlags(fs, &o)
			addEngineFlags(fs, &o.eng)
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if o.model == "" {
					return usageErrorf("--model is required")
				}
				interrupts := make(chan os.Signal, 1)
				signal.Notify(interrupts, os.Interrupt)
				defer signal.Stop(interrupts)
				e, err := openEngine(ctx, o.model, o.eng, "chat needs the model's tokenizer")
				if err != nil {
					return err
				}
				defer e.Close()
				return runChat(ctx, e, o, chatIO{in: os.Stdin, out: os.Stdout, msg: errOut, interrupts: interrupts, prompts: progress.IsTerminal(os.Stdin)})
			}
		},
	})
}

// chatIO is where a chat reads and writes: the conversation on in and out, messages to the user on msg, and
// Ctrl-C on interrupts. prompts says whether to print the ">>> " prompt (a terminal).
type chatIO struct {
	in         io.Reader
	out, msg   io.Writer
	interrupts <-chan os.Signal
	prompts    bool
}

const chatHelp = `Type a message and press Enter. Commands:
  """          start or end a message of several lines (or end a line with \ to continue it)
  /reset       forget the conversation (the system message stays)
  /system TEXT set the system message and start again (/system alone removes it)
  /history     print the conversation
  /exit        leave (also /bye, /quit, or Ctrl-D)
Ctrl-C stops an answer; the conversation goes on.`

// runChat is the chat loop: read a message, answer it streaming, remember both. The keys and values of the
// conversation stay in the engine between turns (engine.Session): a turn computes only its new tokens.
func runChat(ctx context.Context, e *engine.Engine, o generateOptions, cio chatIO) error {
	tok, err := e.Tokenizer()
	if err != nil {
		return err
	}
	if !tok.HasChatTemplate() {
		return fmt.Errorf("%s has no chat template (tokenizer_config.json chat_template or chat_template.jinja): use 'layerstream generate' for plain text", o.model)
	}
	c := &chat{e: e, o: o, cio: cio, sampling: samplingFor(o, e), system: o.system, session: e.NewSession()}
	defer func() { c.session.Close() }()
	slog.Debug("sampling", "seed", c.sampling.Seed, "temperature", c.sampling.Temperature, "top_k", c.sampling.TopK, "top_p", c.sampling.TopP)
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(cio.in)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()
	// The model as given (not its shard folder).
	fmt.Fprintf(cio.msg, "Chatting with %s. /help for commands, Ctrl-D to leave.\n", o.model)
	var m message
	for {
		if cio.prompts {
			fmt.Fprint(cio.out, map[bool]string{false: ">>> ", true: "... "}[m.open()])
		}
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			fmt.Fprintln(cio.out)
			return ctx.Err() // SIGTERM: exit status 130, as every command's
		case <-cio.interrupts:
			m = message{}
			fmt.Fprintln(cio.msg, "\n(Ctrl-D or /exit to leave)")
			continue
		case line, ok = <-lines:
		}
		if !ok {
			fmt.Fprintln(cio.out)
			if m.open() {
				fmt.Fprintln(cio.msg, `(the input ended inside a message of several lines: it was not sent; close it with """ or a line not ending in \)`)
			}
			return <-readErr
		}
		text, done := m.add(line)
		if !done || text == "" {
			continue
		}
		if cmd, arg, isCmd := chatCommand(text); isCmd {
			if c.command(cmd, arg) {
				return nil
			}
			continue
		}
		if err := c.answer(ctx, text); err != nil {
			return err
		}
	}
}

// message gathers the lines of one message: a line, several between """ lines, or lines ending with a backslash.
type message struct {
	lines   []string
	inBlock bool // between """ lines
}

// open reports whether a message of several lines has begun and not ended.
func (m *message) open() bool { return m.inBlock || len(m.lines) > 0 }

// add takes the next line typed, returning the message and true once it is whole (and starting the next).
func (m *message) add(line string) (string, bool) {
	switch {
	case m.inBlock:
		before, found := strings.CutSuffix(line, `"""`)
		if !found {
			m.lines = append(m.lines, line)
			return "", false
		}
		m.lines, m.inBlock = append(m.lines, before), false
	case strings.HasPrefix(line, `"""`) && len(m.lines) == 0:
		rest := strings.TrimPrefix(line, `"""`)
		before, found := strings.CutSuffix(rest, `"""`)
		if !found || rest == "" {
			m.lines, m.inBlock = []string{rest}, true
			return "", false
		}
		m.lines = []string{before}
	case strings.HasSuffix(line, `\`):
		m.lines = append(m.lines, strings.TrimSuffix(line, `\`))
		return "", false
	default:
		m.lines = append(m.lines, line)
	}
	text := strings.TrimSpace(strings.Join(m.lines, "\n"))
	m.lines = nil
	return text, true
}

// chat is a conversation: its engine session (the keys and values of the turns so far), system message,
// history and sampling.
type chat struct {
	e        *engine.Engine
	o        generateOptions
	cio      chatIO
	sampling engine.Sampling
	session  *engine.Session
	system   string
	history  []tokenizer.Message
	turns    int
}

// reset forgets the conversation (the system message stays).
func (c *chat) reset() {
	c.history = nil
	c.session.Close()
	c.session = c.e.NewSession()
}

// command runs a /command, reporting whether it ends the chat.
func (c *chat) command(cmd, arg string) (exit bool) {
	switch cmd {
	case "/exit", "/bye", "/quit":
		return true
	case "/help", "/?":
		fmt.Fprintln(c.cio.msg, chatHelp)
	case "/reset", "/clear":
		c.reset()
		fmt.Fprintln(c.cio.msg, "(conversation forgotten)")
	case "/system":
		c.system = arg
		c.reset()
		fmt.Fprintln(c.cio.msg, "(system message set; conversation forgotten)")
	case "/history":
		if c.system != "" {
			fmt.Fprintf(c.cio.out, "[system] %s\n", c.system)
		}
		for _, m := range c.history {
			fmt.Fprintf(c.cio.out, "[%s] %s\n", m.Role, m.Content)
		}
	default:
		fmt.Fprintf(c.cio.msg, "unknown command %s (/help lists them)\n", cmd)
	}
	return false
}

// answer answers one message, streaming, and remembers both. A request the engine refuses and an answer stopped
// by a guard are said and the chat goes on; other errors end it.
func (c *chat) answer(ctx context.Context, text string) error {
	msgs := c.history
	if c.system != "" {
		msgs = append([]tokenizer.Message{{Role: "system", Content: c.system}}, c.history...)
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: text})
	c.turns++
	// Each answer has its own health checks, whose warnings name the turn.
	monitor := guard.NewMonitor(guard.MonitorOptions{Strict: c.o.strict, Logger: slog.Default().With("turn", c.turns)})
	reply, err := chatTurn(ctx, c.e, engine.TextRequest{Messages: msgs, MaxNewTokens: c.o.maxNew, Sampling: c.sampling, Session: c.session, Monitor: monitor}, c.cio)
	var re *engine.RequestError
	var problem *guard.Problem
	switch {
	case errors.As(err, &re):
		fmt.Fprintf(c.cio.msg, "cannot answer: %v (/reset starts a new conversation)\n", err)
		return nil
	case errors.As(err, &problem) && ctx.Err() == nil:
		// The model's output is broken: say why (and where to read about it), forget the answer, go on.
		fmt.Fprintf(c.cio.msg, "the answer was stopped: %v\n", err)
		return nil
	case err != nil && ctx.Err() != nil:
		return ctx.Err() // SIGTERM: exit status 130, as every command's
	case err != nil:
		return err
	}
	c.history = append(c.history, tokenizer.Message{Role: "user", Content: text}, tokenizer.Message{Role: "assistant", Content: reply})
	c.sampling.Seed++ // the next answer draws afresh, and a rerun with --seed repeats the conversation
	return nil
}

// chatCommand recognizes "/word rest".
func chatCommand(text string) (cmd, arg string, ok bool) {
	if !strings.HasPrefix(text, "/") || strings.Contains(strings.SplitN(text, " ", 2)[0], "\n") {
		return "", "", false
	}
	cmd, arg, _ = strings.Cut(text, " ")
	return cmd, strings.TrimSpace(arg), true
}

// chatTurn streams the answer to req to cio.out; Ctrl-C (cio.interrupts) stops it and keeps what was said. It
// returns the answer's text.
func chatTurn(ctx context.Context, e *engine.Engine, req engine.TextRequest, cio chatIO) (string, error) {
	turn, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan struct{})
	interrupted := false // read after stopped is closed
	go func() {
		defer close(stopped)
		select {
		case <-cio.interrupts:
			interrupted = true
			stop()
		case <-turn.Done():
		}
	}()
	res, err := e.GenerateText(turn, req,
		func(c engine.TextChunk) error {
			_, err := fmt.Fprint(cio.out, c.Text)
			return err
		})
	stop()
	<-stopped
	if res == nil {
		return "", err
	}
	slog.Debug("turn", "prompt_tokens", len(res.PromptIDs), "reused", res.CachedPromptTokens, "generated", len(res.GeneratedIDs),
		"stop", res.StopReason, "tokens_per_s", fmt.Sprintf("%.1f", res.Timings.DecodeTokensPerSec))
	if err != nil && interrupted && ctx.Err() == nil { // Ctrl-C: the answer so far stays
		fmt.Fprintln(cio.out)
		fmt.Fprintln(cio.msg, "(stopped)")
		return res.Text, nil
	}
	fmt.Fprintln(cio.out)
	if err == nil && res.StopReason == engine.StopContext {
		fmt.Fprintln(cio.msg, "(the conversation fills the model's context: /reset to start again)")
	}
	return res.Text, err
}
