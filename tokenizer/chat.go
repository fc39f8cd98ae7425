package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ToolCalls are an assistant's calls of tools; ToolCallID names the call a tool message answers, Name the
	// tool. Templates see them as transformers passes them: message.tool_calls (each {"id", "type": "function",
	// "function": {"name", "arguments"}}, arguments an object), message.tool_call_id, message.name.
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a call of a tool in an assistant's message: Arguments are the decoded JSON arguments (an object,
// as transformers' templates expect; a string when they were not JSON).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

// ErrNoChatTemplate is returned by ApplyChatTemplate for a tokenizer without a chat template.
var ErrNoChatTemplate = errors.New("tokenizer has no chat_template (in tokenizer_config.json or chat_template.jinja)")

// HasChatTemplate reports whether ApplyChatTemplate can be used.
func (t *Tokenizer) HasChatTemplate() bool { return t.chatTemplate != "" }

// ChatTemplate returns the tokenizer's chat template, compiled on first use, with its special tokens (bos_token,
// eos_token) as variables.
func (t *Tokenizer) ChatTemplate() (*ChatTemplate, error) {
	if t.chatTemplate == "" {
		return nil, ErrNoChatTemplate
	}
	t.tplOnce.Do(func() {
		t.chat, t.tplErr = NewChatTemplate(t.chatTemplate, map[string]string{"bos_token": t.bosText, "eos_token": t.eosText})
	})
	return t.chat, t.tplErr
}

// ApplyChatTemplate renders the tokenizer's Jinja chat template as transformers does (ChatTemplate.Render). The
// result holds special tokens as text: encode it with addSpecialTokens false when the template writes the BOS
// itself.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatTemplateWith(msgs, addGenerationPrompt, nil)
}

// ApplyChatTemplateWith is ApplyChatTemplate with more template variables, such as Qwen3's
// {"enable_thinking": false}. They cannot replace the ones ApplyChatTemplate defines.
func (t *Tokenizer) ApplyChatTemplateWith(msgs []Message, addGenerationPrompt bool, vars map[string]any) (string, error) {
	c, err := t.ChatTemplate()
	if err != nil {
		return "", err
	}
	return c.Render(msgs, addGenerationPrompt, vars)
}

// ChatTemplate is a compiled Jinja chat template, rendered as transformers' apply_chat_template renders it:
// trim_blocks and lstrip_blocks on; messages, add_generation_prompt, the tokenizer's special tokens,
// raise_exception, strftime_now and Python's tojson defined. It is safe for concurrent use.
type ChatTemplate struct {
	tpl     *exec.Template
	special map[string]any
	now     func() time.Time
}

// NewChatTemplate compiles a chat template. special are the tokenizer's special tokens the template sees by name
// (bos_token, eos_token, ...); an empty one is left undefined, as transformers leaves a token the tokenizer does
// not have. Templates cannot include or import other files.
func NewChatTemplate(src string, special map[string]string) (*ChatTemplate, error) {
	tpl, err := compileTemplate(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	c := &ChatTemplate{tpl: tpl, special: map[string]any{}, now: time.Now}
	for k, v := range special {
		if v != "" {
			c.special[k] = v
		}
	}
	return c, nil
}

// WithClock returns the template with strftime_now reading now instead of the system clock (reproducible
// prompts, tests: Llama 3.2's template writes today's date).
func (c *ChatTemplate) WithClock(now func() time.Time) *ChatTemplate {
	d := *c
	d.now = now
	return &d
}

// Render renders the template for msgs. vars are more template variables (Qwen3's {"enable_thinking": false});
// they cannot replace the ones Render defines. A template that raises (raise_exception, as Gemma's does for a
// system message) gives an error holding the template's message.
func (c *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool, vars map[string]any) (_ string, err error) {
	defer func() {
		// The template comes with the model; a template the Jinja engine trips over is an error, not a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("chat template: the Jinja engine failed: %v", r)
		}
	}()
	messages := make([]any, len(msgs))
	for i, m := range msgs {
		msg := map[string]any{"role": m.Role, "content": m.Content}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				calls[j] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
			}
			msg["tool_calls"] = calls
		}
		if m.ToolCallID != "" {
			msg["tool_call_id"] = m.ToolCallID
		}
		if m.Name != "" {
			msg["name"] = m.Name
		}
		messages[i] = msg
	}
	var raised error
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Update(exec.NewContext(vars))
	ctx.Update(exec.NewContext(c.special))
	ctx.Update(exec.NewContext(map[string]any{
		"messages":              messages,
		"add_generation_prompt": addGenerationPrompt,
		"raise_exception": func(msg string) (string, error) {
			raised = &TemplateError{Message: msg}
			return "", raised
		},
		"strftime_now": func(format string) string { return strftime(c.now(), format) },
	}))
	out, err := c.tpl.ExecuteToString(ctx)
	if raised != nil {
		return "", raised
	}
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// TemplateError is a chat template's own refusal: its raise_exception(Message), as transformers raises
// jinja2's TemplateError (Gemma: "System role not supported").
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return "chat template refused the conversation: " + e.Message }

// compileTemplate parses a chat template. Templates cannot include or import other files.
func compileTemplate(src string) (_ *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the Jinja parser failed: %v", r)
		}
	}()
	if src, err = rewriteConditionals(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(src)); err != nil {
		return nil, err
	}
	src = rewriteNegativeIndexes(src)
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	loader, err := loaders.NewMemoryLoader(map[string]string{"/chat_template": src})
	if err != nil {
		return nil, err
	}
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", filterToJSON); err != nil {
		return nil, err
	}
	env := &exec.Environment{
		Context:           exec.EmptyContext(),
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: controlStructures,
		Methods:           methods,
	}
	return exec.NewTemplate("/chat_template", cfg, loader, env)
}

// strftime formats t with Python's strftime directives (those chat templates use: day, month, year, weekday,
// time; %-d and the other glibc "no padding" forms).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(v, width int) string {
			if !pad {
				return strconv.Itoa(v)
			}
			return fmt.Sprintf("%0*d", width, v)
		}
		switch format[i] {
		case 'd':
			b.WriteString(num(t.Day(), 2))
		case 'm':
			b.WriteString(num(int(t.Month()), 2))
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			b.WriteString(num(t.Year()%100, 2))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'H':
			b.WriteString(num(t.Hour(), 2))
		case 'I':
			b.WriteString(num((t.Hour()+11)%12+1, 2))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'M':
			b.WriteString(num(t.Minute(), 2))
		case 'S':
			b.WriteString(num(t.Second(), 2))
		case 'j':
			b.WriteString(num(t.YearDay(), 3))
		case 'e':
			b.WriteString(fmt.Sprintf("%2d", t.Day()))
		case '%':
			b.WriteByte('%')
		default: // as Python (glibc) does with an unknown directive: written as is
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// filterToJSON is transformers' tojson: Python's json.dumps with ensure_ascii=False and its default separators
// (", " and ": "), or indented with indent=N. Go maps have no order, so their keys are sorted; dicts written in
// the template keep theirs.
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	if v := params.GetKeywordArgument("indent", nil); !v.IsNil() {
		if !v.IsInteger() {
			return exec.AsValue(fmt.Errorf("tojson: indent must be an integer, got %s", v.String()))
		}
		indent = v.Integer()
	}
	var sb strings.Builder
	if err := (pyJSON{&sb, indent}).value(in.Interface(), 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(sb.String())
}

// pyJSON writes values as Python's json.dumps does (sort_keys for Go maps, a template's dicts in their order):
// on one line (indent < 0) or indent spaces a level.
type pyJSON struct {
	sb     *strings.Builder
	indent int
}

// value writes v at nesting depth.
func (j pyJSON) value(v any, depth int) error {
	sb := j.sb
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case *exec.Value:
		return j.value(x.Interface(), depth)
	case bool:
		sb.WriteString(strconv.FormatBool(x))
	case string:
		writePyString(sb, x)
	case int:
		sb.WriteString(strconv.Itoa(x))
	case int64:
		sb.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("cannot write %v as JSON", x)
		}
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0" // Python writes floats with a point
		}
		sb.WriteString(s)
	case []any:
		return j.list(len(x), depth, func(i int) error { return j.value(x[i], depth+1) })
	case []string:
		return j.list(len(x), depth, func(i int) error { writePyString(sb, x[i]); return nil })
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return j.object(keys, depth, func(i int) any { return x[keys[i]] })
	case *exec.Dict:
		keys := make([]string, len(x.Pairs))
		for i, p := range x.Pairs {
			keys[i] = p.Key.String()
		}
		return j.object(keys, depth, func(i int) any { return x.Pairs[i].Value })
	case exec.ValuesList:
		return j.list(len(x), depth, func(i int) error { return j.value(x[i], depth+1) })
	default:
		return j.reflected(v, depth)
	}
	return nil
}

// reflected writes the slices, arrays, string-keyed maps and numbers of other Go types.
func (j pyJSON) reflected(v any, depth int) error {
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Slice, reflect.Array:
		return j.list(r.Len(), depth, func(i int) error { return j.value(r.Index(i).Interface(), depth+1) })
	case reflect.Map:
		if r.Type().Key().Kind() != reflect.String {
			break
		}
		keys := make([]string, 0, r.Len())
		for _, k := range r.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		return j.object(keys, depth, func(i int) any { return r.MapIndex(reflect.ValueOf(keys[i]).Convert(r.Type().Key())).Interface() })
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		j.sb.WriteString(strconv.FormatInt(r.Int(), 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		j.sb.WriteString(strconv.FormatUint(r.Uint(), 10))
		return nil
	case reflect.Float32:
		return j.value(r.Float(), depth)
	}
	return fmt.Errorf("cannot write a %T as JSON", v)
}

// list writes n items (item i by item) as a JSON array at depth.
func (j pyJSON) list(n, depth int, item func(i int) error) error {
	if n == 0 {
		j.sb.WriteString("[]")
		return nil
	}
	j.sb.WriteByte('[')
	for i := range n {
		j.separate(i, depth)
		if err := item(i); err != nil {
			return err
		}
	}
	j.newline(depth)
	j.sb.WriteByte(']')
	return nil
}

// object writes keys and their values (value(i) for keys[i]) as a JSON object at depth.
func (j pyJSON) object(keys []string, depth int, value func(i int) any) error {
	if len(keys) == 0 {
		j.sb.WriteString("{}")
		return nil
	}
	j.sb.WriteByte('{')
	for i, k := range keys {
		j.separate(i, depth)
		writePyString(j.sb, k)
		j.sb.WriteString(": ")
		if err := j.value(value(i), depth+1); err != nil {
			return err
		}
	}
	j.newline(depth)
	j.sb.WriteByte('}')
	return nil
}

// separate starts item i of a list or object at depth: after a separator unless it is the first, on its own
// line when indenting.
func (j pyJSON) separate(i, depth int) {
	if i > 0 {
		if j.indent >= 0 {
			j.sb.WriteByte(',')
		} else {
			j.sb.WriteString(", ")
		}
	}
	j.newline(depth + 1)
}

// newline starts a line indented for depth d, when indenting.
func (j pyJSON) newline(d int) {
	if j.indent >= 0 {
		j.sb.WriteByte('\n')
		j.sb.WriteString(strings.Repeat(" ", j.indent*d))
	}
}

// writePyString writes s as Python's json.dumps(s, ensure_ascii=False) does.
func writePyString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}
