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
}

// ErrNoChatTemplate is returned by ApplyChatTemplate for a tokenizer without a chat template.
var ErrNoChatTemplate = errors.New("tokenizer has no chat_template (in tokenizer_config.json or chat_template.jinja)")

// HasChatTemplate reports whether ApplyChatTemplate can be used.
func (t *Tokenizer) HasChatTemplate() bool { return t.chatTemplate != "" }

// ApplyChatTemplate renders the tokenizer's Jinja chat template as transformers does (trim_blocks and
// lstrip_blocks on; bos_token, eos_token, add_generation_prompt and raise_exception defined). The result holds
// special tokens as text: encode it with addSpecialTokens false when the template writes the BOS itself.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatTemplateWith(msgs, addGenerationPrompt, nil)
}

// ApplyChatTemplateWith is ApplyChatTemplate with more template variables, such as Qwen3's
// {"enable_thinking": false}. They cannot replace the ones ApplyChatTemplate defines.
func (t *Tokenizer) ApplyChatTemplateWith(msgs []Message, addGenerationPrompt bool, vars map[string]any) (_ string, err error) {
	if t.chatTemplate == "" {
		return "", ErrNoChatTemplate
	}
	defer func() {
		// The template comes with the model; a template the Jinja engine trips over is an error, not a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("chat template: the Jinja engine failed: %v", r)
		}
	}()
	t.tplOnce.Do(func() { t.tpl, t.tplErr = compileTemplate(t.chatTemplate) })
	if t.tplErr != nil {
		return "", fmt.Errorf("chat template: %w", t.tplErr)
	}
	messages := make([]any, len(msgs))
	for i, m := range msgs {
		messages[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Update(exec.NewContext(vars))
	ctx.Update(exec.NewContext(map[string]any{
		"messages":              messages,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bosText,
		"eos_token":             t.eosText,
		"raise_exception":       raiseException,
		"strftime_now":          strftimeNow,
	}))
	out, err := t.tpl.ExecuteToString(ctx)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// compileTemplate parses a chat template. Templates cannot include or import other files.
func compileTemplate(src string) (_ *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the Jinja parser failed: %v", r)
		}
	}()
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
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
	return exec.NewTemplate("/chat_template", cfg, loader, env)
}

func raiseException(msg string) (string, error) {
	return "", fmt.Errorf("raise_exception: %s", msg)
}

// strftimeNow formats the current time with the common Python strftime directives.
func strftimeNow(format string) string {
	now := time.Now()
	r := strings.NewReplacer("%d", now.Format("02"), "%m", now.Format("01"), "%Y", now.Format("2006"),
		"%y", now.Format("06"), "%b", now.Format("Jan"), "%B", now.Format("January"), "%a", now.Format("Mon"),
		"%A", now.Format("Monday"), "%H", now.Format("15"), "%M", now.Format("04"), "%S", now.Format("05"),
		"%%", "%")
	return r.Replace(format)
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
	if err := writePyJSON(&sb, in.Interface(), indent, 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(sb.String())
}

func writePyJSON(sb *strings.Builder, v any, indent, depth int) error {
	newline := func(d int) {
		if indent >= 0 {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	sep := ", "
	if indent >= 0 {
		sep = ","
	}
	writeList := func(n int, item func(i int) error) error {
		if n == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i := range n {
			if i > 0 {
				sb.WriteString(sep)
			}
			newline(depth + 1)
			if err := item(i); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte(']')
		return nil
	}
	writeObject := func(keys []string, value func(i int) any) error {
		if len(keys) == 0 {
			sb.WriteString("{}")
			return nil
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(sep)
			}
			newline(depth + 1)
			writePyString(sb, k)
			sb.WriteString(": ")
			if err := writePyJSON(sb, value(i), indent, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
		return nil
	}
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case *exec.Value:
		return writePyJSON(sb, x.Interface(), indent, depth)
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
		return writeList(len(x), func(i int) error { return writePyJSON(sb, x[i], indent, depth+1) })
	case []string:
		return writeList(len(x), func(i int) error { writePyString(sb, x[i]); return nil })
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return writeObject(keys, func(i int) any { return x[keys[i]] })
	case *exec.Dict:
		keys := make([]string, len(x.Pairs))
		for i, p := range x.Pairs {
			keys[i] = p.Key.String()
		}
		return writeObject(keys, func(i int) any { return x.Pairs[i].Value })
	case exec.ValuesList:
		return writeList(len(x), func(i int) error { return writePyJSON(sb, x[i], indent, depth+1) })
	default:
		r := reflect.ValueOf(v)
		switch r.Kind() {
		case reflect.Slice, reflect.Array:
			return writeList(r.Len(), func(i int) error { return writePyJSON(sb, r.Index(i).Interface(), indent, depth+1) })
		case reflect.Map:
			if r.Type().Key().Kind() != reflect.String {
				break
			}
			keys := make([]string, 0, r.Len())
			for _, k := range r.MapKeys() {
				keys = append(keys, k.String())
			}
			slices.Sort(keys)
			return writeObject(keys, func(i int) any { return r.MapIndex(reflect.ValueOf(keys[i]).Convert(r.Type().Key())).Interface() })
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			sb.WriteString(strconv.FormatInt(r.Int(), 10))
			return nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			sb.WriteString(strconv.FormatUint(r.Uint(), 10))
			return nil
		case reflect.Float32:
			return writePyJSON(sb, r.Float(), indent, depth)
		}
		return fmt.Errorf("cannot write a %T as JSON", v)
	}
	return nil
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
