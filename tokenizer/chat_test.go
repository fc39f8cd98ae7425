package tokenizer

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

// withTemplate builds a small tokenizer whose tokenizer_config.json holds the given chat template.
func withTemplate(t *testing.T, tpl, bos, eos string) *Tokenizer {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"chat_template": tpl, "bos_token": bos, "eos_token": eos})
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, tiny(t, []string{"a"}, []string{}, nil, nil), cfg)
}

func render(t *testing.T, tok *Tokenizer, msgs []Message, gen bool) string {
	t.Helper()
	out, err := tok.ApplyChatTemplate(msgs, gen)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The expected strings below are written by hand from each template's logic.

func TestChatTemplateQwen3(t *testing.T) {
	tok := loadShared(t, "tokenizers/qwen3")
	for _, c := range []struct {
		name string
		msgs []Message
		gen  bool
		want string
	}{
		{"system and user", []Message{{Role: "system", Content: "You are helpful."}, {Role: "user", Content: "Hi"}}, true,
			"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		// An assistant turn before the last user turn loses its reasoning.
		{"old reasoning dropped", []Message{{Role: "user", Content: "2+2?"}, {Role: "assistant", Content: "<think>\nadd\n</think>\n\n4"}, {Role: "user", Content: "and 3+3?"}}, false,
			"<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n"},
		// The last assistant turn after the last user turn keeps it, rewritten.
		{"last reasoning kept", []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "<think>\nhmm\n</think>\n\nHello!"}}, false,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHello!<|im_end|>\n"},
		// Consecutive tool results share one user turn.
		{"tool results", []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "calling"}, {Role: "tool", Content: "42"}, {Role: "tool", Content: "43"}}, true,
			"<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n43\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
	} {
		if got := render(t, tok, c.msgs, c.gen); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	noThink, err := tok.ApplyChatTemplateWith([]Message{{Role: "user", Content: "Hi"}}, true, map[string]any{"enable_thinking": false})
	if want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; err != nil || noThink != want {
		t.Errorf("enable_thinking false:\n got %q, %v\nwant %q", noThink, err, want)
	}
	// The rendered prompt encodes its markers as special tokens.
	ids := encode(t, tok, render(t, tok, []Message{{Role: "user", Content: "Hi"}}, true), false)
	if ids[0] != 151644 || ids[len(ids)-3] != 151644 {
		t.Errorf("ids %v: want <|im_start|> (151644) as first and third-last", ids)
	}
}

const llama2Template = `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`

func TestChatTemplateLlama2(t *testing.T) {
	tok := withTemplate(t, llama2Template, "<s>", "</s>")
	got := render(t, tok, []Message{{Role: "system", Content: "S"}, {Role: "user", Content: " Hi "}, {Role: "assistant", Content: "Yo"}, {Role: "user", Content: "Q"}}, true)
	want := "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n Hi [/INST] Yo </s><s>[INST] Q [/INST]"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	_, err := tok.ApplyChatTemplate([]Message{{Role: "assistant", Content: "first"}}, true)
	if err == nil || !strings.Contains(err.Error(), "Conversation roles must alternate") {
		t.Errorf("raise_exception: err %v", err)
	}
}

const llama3Template = `{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`

func TestChatTemplateLlama3(t *testing.T) {
	tok := withTemplate(t, llama3Template, "<|begin_of_text|>", "<|eot_id|>")
	got := render(t, tok, []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Hi "}}, true)
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}

// TestChatTemplateBlocks checks transformers' trim_blocks and lstrip_blocks: a block tag's line break and
// indentation vanish, an expression's line break stays.
func TestChatTemplateBlocks(t *testing.T) {
	tpl := "{% for message in messages %}\n" +
		"  {% if loop.first and message['role'] != 'system' %}\n" +
		"{{ '<|im_start|>system\\nDefault<|im_end|>\\n' }}" +
		"  {% endif %}\n" +
		"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}\n" +
		"{% endfor %}\n" +
		"{% if add_generation_prompt %}\n" +
		"    {{- '<|im_start|>assistant\\n' }}\n" +
		"{% endif %}"
	tok := withTemplate(t, tpl, "", "<|im_end|>")
	got := render(t, tok, []Message{{Role: "user", Content: "Hi"}}, true)
	want := "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\n<|im_start|>assistant\n\n"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}

func TestChatTemplateToJSON(t *testing.T) {
	tok := withTemplate(t, `{{ {"b": [1, 2.5, "é\"<>"], "a": none, "c": true} | tojson }}|{{ messages[0] | tojson }}`, "", "")
	got := render(t, tok, []Message{{Role: "user", Content: "x\ny"}}, false)
	want := `{"b": [1, 2.5, "é\"<>"], "a": null, "c": true}|{"content": "x\ny", "role": "user"}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	// Indented, as Python's json.dumps(…, indent=2, ensure_ascii=False) writes it; empty lists and dicts stay [] and {}.
	tok = withTemplate(t, `{{ {"b": [1, 2.5, "é\"<>", [], {}], "a": none, "c": true, "d": {"y": [1], "x": 2}} | tojson(indent=2) }}`, "", "")
	got = render(t, tok, nil, false)
	want = "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\\\"<>\",\n    [],\n    {}\n  ],\n  \"a\": null,\n  \"c\": true,\n" +
		"  \"d\": {\n    \"y\": [\n      1\n    ],\n    \"x\": 2\n  }\n}"
	if got != want {
		t.Errorf("indent=2:\n got %q\nwant %q", got, want)
	}
}

func TestNoChatTemplate(t *testing.T) {
	tok := mustParse(t, tiny(t, []string{"a"}, []string{}, nil, nil), nil)
	if _, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, true); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("err %v, want ErrNoChatTemplate", err)
	}
	bad := withTemplate(t, "{% for %}", "", "")
	if _, err := bad.ApplyChatTemplate(nil, true); err == nil || !strings.Contains(err.Error(), "chat template") {
		t.Errorf("malformed template: err %v", err)
	}
}

func TestChatTemplateConcurrent(t *testing.T) {
	tok := withTemplate(t, llama3Template, "<|begin_of_text|>", "<|eot_id|>")
	want := render(t, tok, []Message{{Role: "user", Content: "Hi"}}, true)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if got, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "Hi"}}, true); err != nil || got != want {
					t.Errorf("got %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
