package bench

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/tokenizer"
)

// englishParagraphs is English prose to encode: the Go specification from GOROOT with its HTML removed, split
// into paragraphs (about 200 KB), the way prompts arrive.
func englishParagraphs(b *testing.B) ([]string, int64) {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "doc", "go_spec.html"))
	if err != nil {
		b.Skipf("skipping: no English corpus: %v", err)
	}
	text := html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(string(raw), ""))
	var paras []string
	var n int64
	for _, p := range strings.Split(text, "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			paras = append(paras, p)
			n += int64(len(p))
		}
	}
	return paras, n
}

// BenchmarkTokenizerEncode measures encode throughput on one core (MB/s of English text; also per CPU second).
// The tokenizer's word cache is warm after the first pass, as it is within any long text.
func BenchmarkTokenizerEncode(b *testing.B) {
	paras, size := englishParagraphs(b)
	for _, c := range []struct{ name, dir string }{
		{"qwen3", "tokenizers/qwen3"},
		{"llama2-32k", "tokenizers/llama2-32k"},
	} {
		b.Run(c.name, func(b *testing.B) {
			tok, err := tokenizer.Load(testutil.SharedPath(b, "models", c.dir))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			tokens := 0
			cpu0 := testutil.ProcessCPU()
			for b.Loop() {
				tokens = 0
				for _, p := range paras {
					ids, err := tok.Encode(p, true)
					if err != nil {
						b.Fatal(err)
					}
					tokens += len(ids)
				}
			}
			cpu := testutil.ProcessCPU() - cpu0
			b.ReportMetric(float64(size)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
			b.ReportMetric(float64(size)/float64(tokens), "bytes/token")
		})
	}
}

// BenchmarkTokenizerEncodeCold is BenchmarkTokenizerEncode with an empty word cache: each pass encodes with a
// freshly loaded tokenizer (the load is not timed).
func BenchmarkTokenizerEncodeCold(b *testing.B) {
	paras, size := englishParagraphs(b)
	for _, c := range []struct{ name, dir string }{
		{"qwen3", "tokenizers/qwen3"},
		{"llama2-32k", "tokenizers/llama2-32k"},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := testutil.SharedPath(b, "models", c.dir)
			b.SetBytes(size)
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				tok, err := tokenizer.Load(dir)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC() // the load's garbage is not the encoder's
				b.StartTimer()
				cpu0 := testutil.ProcessCPU()
				for _, p := range paras {
					if _, err := tok.Encode(p, true); err != nil {
						b.Fatal(err)
					}
				}
				cpu += testutil.ProcessCPU() - cpu0
			}
			b.ReportMetric(float64(size)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		})
	}
}

// BenchmarkTokenizerLoad measures loading a tokenizer.json (Qwen3: 151k tokens and merges, 11 MB).
func BenchmarkTokenizerLoad(b *testing.B) {
	for _, c := range []struct{ name, dir string }{
		{"qwen3", "tokenizers/qwen3"},
		{"llama2-32k", "tokenizers/llama2-32k"},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := testutil.SharedPath(b, "models", c.dir)
			cpu0 := testutil.ProcessCPU()
			for b.Loop() {
				if _, err := tokenizer.Load(dir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkTokenizerStream measures streaming decode, one id at a time, of the encoded corpus.
func BenchmarkTokenizerStream(b *testing.B) {
	paras, size := englishParagraphs(b)
	tok, err := tokenizer.Load(testutil.SharedPath(b, "models", "tokenizers", "llama2-32k"))
	if err != nil {
		b.Fatal(err)
	}
	ids, err := tok.Encode(strings.Join(paras, "\n\n"), false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		d := tok.NewStreamDecoder(true)
		for _, id := range ids {
			d.Next(id)
		}
		d.Flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ids)), "ns/token")
}
