package tokenizer

import (
	"os"
	"testing"
)

func BenchmarkLoadQwen3Tmp(b *testing.B) {
	data, _ := os.ReadFile("/work/shared/models/tokenizers/qwen3/tokenizer.json")
	cfg, _ := os.ReadFile("/work/shared/models/tokenizers/qwen3/tokenizer_config.json")
	for b.Loop() {
		if _, err := Parse(data, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
