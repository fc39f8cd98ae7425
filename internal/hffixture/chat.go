package hffixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ChatMessage is one message of a chat-template case.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatCase is one rendering by transformers' apply_chat_template(tokenize=False).
type ChatCase struct {
	Name                string         `json:"name"`
	Messages            []ChatMessage  `json:"messages"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	TemplateKwargs      map[string]any `json:"template_kwargs"`
	// Expected is the rendered string; empty when the template refused (Error holds the exception text).
	Expected string `json:"expected"`
	Error    string `json:"error"`
}

// ChatFixture is testdata/chat/<model>: the model's template, the special tokens the template sees, the fixed
// clock strftime_now must use, and the cases.
type ChatFixture struct {
	Model         string            `json:"model"`
	Template      string            `json:"-"`
	SpecialTokens map[string]string `json:"special_tokens"`
	StrftimeNow   string            `json:"strftime_now"` // local time, ISO 8601 without zone
	Cases         []ChatCase        `json:"cases"`
}

// Now parses StrftimeNow: the time a renderer under test must give strftime_now.
func (c *ChatFixture) Now() (time.Time, error) {
	return time.ParseInLocation("2006-01-02T15:04:05", c.StrftimeNow, time.Local)
}

// ChatModels lists the folders of testdata/chat holding a cases.json, sorted.
func ChatModels() []string {
	dir, err := Testdata("chat")
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "cases.json")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// LoadChat reads testdata/chat/<model>/{chat_template.jinja,cases.json}.
func LoadChat(model string) (*ChatFixture, error) {
	if model == "" || model != filepath.Base(model) || model == ".." {
		return nil, fmt.Errorf("hffixture: bad chat model name %q", model)
	}
	dir, err := Testdata("chat", model)
	if err != nil {
		return nil, err
	}
	tpl, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	var c ChatFixture
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("hffixture: chat %s: cases.json: %w", model, err)
	}
	c.Template = string(tpl)
	return &c, nil
}
