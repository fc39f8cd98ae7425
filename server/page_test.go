package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// TestPage: GET / is the chat page, with its files, under a strict Content-Security-Policy, without the key.
func TestPage(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "k"})
	for path, want := range map[string]string{"/": "<!doctype html>", "/page/chat.js": "/v1/chat/completions",
		"/page/markdown.js": "const Markdown", "/page/pipeline.js": "/api/pipeline", "/page/style.css": "#timeline"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: %d %q, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
		}
	}
	if code, _ := get(t, ts.URL+"/page/nothing.js"); code != 404 {
		t.Errorf("a missing file: %d", code)
	}
}

// TestInfo: /api/info tells the page the model's id, context length and layers.
func TestInfo(t *testing.T) {
	s, ts := newTestServer(t, Config{MaxTokens: 300})
	code, body := get(t, ts.URL+"/api/info")
	var info struct {
		Model    string `json:"model"`
		Context  int    `json:"context_length"`
		Max      int    `json:"max_tokens"`
		Layers   int    `json:"layers"`
		Pipeline bool   `json:"pipeline"`
	}
	if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil || info.Model != "stories" ||
		info.Context != s.cfg.Engine.ContextLength() || info.Max != 300 || info.Layers != s.cfg.Engine.Config().NumHiddenLayers || !info.Pipeline {
		t.Errorf("info: %d %s", code, body)
	}
}

// TestPipeline: /api/pipeline streams the profiler's events while a request is generated: compute per layer
// and sampling, with the tokens generated so far.
func TestPipeline(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/pipeline", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	next := func() pipelineBatchJSON {
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var b pipelineBatchJSON
				if err := json.Unmarshal([]byte(d), &b); err != nil {
					t.Fatalf("%q: %v", d, err)
				}
				return b
			}
		}
		t.Fatalf("the stream ended: %v", sc.Err())
		return pipelineBatchJSON{}
	}
	if b := next(); len(b.Events) != 0 { // the first batch comes at once, before any generation
		t.Errorf("first batch %+v", b)
	}
	go func() {
		if resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}`)); err == nil {
			resp.Body.Close()
		}
	}()
	seen := map[string]bool{}
	layers := map[int]bool{}
	var tokens int64
	for !(seen["forward"] && seen["sample"] && tokens >= 8) {
		b := next()
		for _, e := range b.Events {
			seen[string(e.Category)] = true
			if e.Category == "forward" && e.Layer >= 0 {
				layers[e.Layer] = true
			}
		}
		tokens = b.Tokens
	}
	if n := s.cfg.Engine.Config().NumHiddenLayers; len(layers) != n {
		t.Errorf("compute events for %d layers, want %d", len(layers), n)
	}
}

// TestPipelineEndsOnShutdown: an open pipeline view does not hold a graceful shutdown for its grace period.
func TestPipelineEndsOnShutdown(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, time.Minute) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/api/pipeline")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve waited for the pipeline view")
	}
}

// TestMarkdownRenderer runs the page's Markdown renderer with node: HTML in the text is escaped everywhere,
// and code fences, inline code, bold, italic, headings and lists render. It skips without node.
func TestMarkdownRenderer(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping: node is not installed (the page's renderer is plain JavaScript)")
	}
	cases := map[string]string{
		"<script>alert(1)</script> & \"q\"":         "<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;</p>",
		"**b** *i* _j_ `x<y>` **<b>**":              "<p><strong>b</strong> <em>i</em> <em>j</em> <code>x&lt;y&gt;</code> <strong>&lt;b&gt;</strong></p>",
		"# T\n- a\n- b\n\n1. c\n2. d":               "<h1>T</h1><ul><li>a</li><li>b</li></ul><ol><li>c</li><li>d</li></ol>",
		"```go\" onload=\"x\nif a<b {}\n```\nafter": "<pre><span class=\"lang\">goonloadx</span><code class=\"lang-goonloadx\">if a&lt;b {}</code></pre><p>after</p>",
		"text\n```\nunclosed <i>":                   "<p>text</p><pre><code>unclosed &lt;i&gt;</code></pre>",
		"line one\nline two":                        "<p>line one<br>line two</p>",
	}
	in, _ := json.Marshal(cases)
	script := `const M = require(process.argv[1]); const cases = JSON.parse(process.argv[2]);
const out = {}; for (const k in cases) out[k] = M.render(k); console.log(JSON.stringify(out));`
	abs, _ := filepath.Abs(filepath.Join("page", "markdown.js"))
	raw, err := exec.Command(node, "-e", script, abs, string(in)).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, raw)
	}
	var got map[string]string
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	for md, want := range cases {
		if got[md] != want {
			t.Errorf("render(%q)\n got %s\nwant %s", md, got[md], want)
		}
	}
}

// chromium finds a Chromium or Chrome to drive headless, or skips saying why.
func chromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("LAYERSTREAM_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "chrome"} {
		if name == "" {
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("skipping: no chromium to load the chat page with (apt-get install chromium, or set LAYERSTREAM_CHROMIUM)")
	return ""
}

// TestChatPageInBrowser loads the chat page in headless Chromium, which sends a message (?autosend=1) with the
// API key (given in the URL's fragment) and streams the answer: the answer shown is the engine's greedy one,
// the page shows the model and its speed, and the pipeline view received the profiler's events. A screenshot
// of the page goes to $LAYERSTREAM_CHAT_SCREENSHOT when set (docs/chat-page.png is made so). Then Stop
// cancels a second answer (the server's sequence ends) and New chat empties the conversation.
func TestChatPageInBrowser(t *testing.T) {
	path := chromium(t)
	s, ts := newTestServer(t, Config{APIKey: "k3y"})
	s.token = func() { time.Sleep(2 * time.Millisecond) } // answers long enough to be stopped
	prompt, system := "Once upon a time", "Tell a story."
	msgs := []tokenizer.Message{{Role: "system", Content: system}, {Role: "user", Content: prompt}}
	want, err := s.cfg.Engine.GenerateText(context.Background(), engine.TextRequest{Messages: msgs, MaxNewTokens: 120}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"prompt": {prompt}, "system": {system}, "autosend": {"1"}, "temperature": {"0"}, "max_tokens": {"120"}}
	b := openBrowser(t, path, ts.URL+"/?"+q.Encode()+"#key=k3y")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.waitFor(t, ctx, `document.body.dataset.state === "done" && Number(document.body.dataset.pipelineEvents || 0) > 0`)
	var page struct {
		Answer, Header, Speed, Note string
		Events                      int
		Bars                        bool
	}
	err = b.eval(`({answer: document.querySelector(".message.assistant").dataset.raw,
		header: document.getElementById("model").textContent, speed: document.getElementById("tps").textContent,
		note: document.querySelector(".message.assistant .note")?.textContent ?? "",
		events: Number(document.body.dataset.pipelineEvents)})`, &page)
	if err != nil {
		t.Fatal(err)
	}
	if page.Answer != want.Text {
		t.Errorf("the page shows %q, want %q", page.Answer, want.Text)
	}
	if !strings.Contains(page.Header, "stories · 512 tokens of context") || page.Speed == "–" || !strings.Contains(page.Note, "120 tokens") {
		t.Errorf("page: %+v", page)
	}
	if out := os.Getenv("LAYERSTREAM_CHAT_SCREENSHOT"); out != "" {
		time.Sleep(1500 * time.Millisecond) // idle: the timeline shows the answer's burst of work, zoomed
		if err := b.screenshot(out); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", out)
	}
	stopAndNewChat(t, ctx, b, s)
}

// stopAndNewChat sends a long message from the page, stops it once text arrives, and starts a new chat.
func stopAndNewChat(t *testing.T, ctx context.Context, b *browser, s *Server) {
	var ok bool
	if err := b.eval(`document.getElementById("max-tokens").value = "300";
		document.getElementById("input").value = "Tell me more";
		document.getElementById("composer").requestSubmit(); true`, &ok); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, ctx, `document.body.dataset.state === "answering" && document.querySelectorAll(".message.assistant")[1]?.dataset.raw.length > 0`)
	b.eval(`document.getElementById("stop").click(); true`, &ok)
	b.waitFor(t, ctx, `document.body.dataset.state === "done" && document.querySelectorAll(".message.assistant")[1].textContent.includes("stopped")`)
	for s.cfg.Engine.Load().Active > 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the stopped answer's sequence is still in the batch")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if load := s.cfg.Engine.Load(); load.Tokens >= 120+120+300 {
		t.Errorf("the stopped answer ran to its end: %d tokens generated in all", load.Tokens)
	}
	b.eval(`document.getElementById("new-chat").click(); true`, &ok)
	b.waitFor(t, ctx, `document.querySelectorAll(".message").length === 0`)
}
