// Package bench holds benchmarks that need real-size synthetic models. They are not run by `go test` without
// -bench.
package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/synth"
)

// benchLayers is the number of decoder layers of the synthetic TinyLlama-1.1B-shape model:
// $LAYERSTREAM_BENCH_LAYERS, default 4 (the real model has 22).
func benchLayers(b *testing.B) int {
	n := 4
	if s := os.Getenv("LAYERSTREAM_BENCH_LAYERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("LAYERSTREAM_BENCH_LAYERS=%q: want a positive integer", s)
		}
		n = v
	}
	return n
}

// BenchmarkGenerateDecode measures decode tokens/s on a synthetic TinyLlama-1.1B-shape checkpoint (bf16 on
// disk), streamed layer by layer and fully resident, in one run, with weights widened to f32 on the device
// (the default) and kept in bf16. The checkpoint is split once;
// a warm-up generation brings the shards into the page cache and compiles the graphs.
//
//	go test ./bench -run '^$' -bench GenerateDecode -benchtime 3x
//	LAYERSTREAM_BENCH_LAYERS=22 go test ./bench -run '^$' -bench GenerateDecode -benchtime 3x -timeout 30m
func BenchmarkGenerateDecode(b *testing.B) {
	shape := synth.Shapes["tinyllama-1.1b"]
	shape.NumLayers = benchLayers(b)
	dir := b.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.BF16, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	prompt := make([]int, 16)
	for i := range prompt {
		prompt[i] = 1 + i*97%shape.VocabSize
	}
	const newTokens = 16
	for _, mode := range []struct {
		name string
		opts engine.Options
	}{
		{"streamed", engine.Options{}},
		{"resident", engine.Options{Resident: true}},
		{"streamed-bf16", engine.Options{DType: "bf16"}},
		{"resident-bf16", engine.Options{DType: "bf16", Resident: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			e, err := engine.Open(ctx, dir, mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			req := engine.Request{PromptIDs: prompt, MaxNewTokens: newTokens, StopIDs: []int{}}
			if _, err := e.Generate(ctx, req, nil); err != nil { // warm-up
				b.Fatal(err)
			}
			var decode, prefill float64
			b.ResetTimer()
			for range b.N {
				res, err := e.Generate(ctx, req, nil)
				if err != nil {
					b.Fatal(err)
				}
				decode += res.Timings.DecodeTokensPerSec
				prefill += res.Timings.PrefillTokensPerSec
			}
			b.ReportMetric(decode/float64(b.N), "decode_tok/s")
			// Weight bytes read per decoded token: the decode weight throughput.
			b.ReportMetric(decode/float64(b.N)*float64(weightBytesPerToken(shape, mode.opts.DType))/1e9, "weights_GB/s")
			b.ReportMetric(prefill/float64(b.N), "prefill_tok/s")
			b.ReportMetric(float64(shape.NumLayers), "layers")
		})
	}
}

// weightBytesPerToken is the bytes of every decoder layer plus the output projection on the device (4 per
// weight, 2 with dtype bf16).
func weightBytesPerToken(s synth.Shape, dtype engine.DType) int64 {
	d := s.HeadDim
	if d == 0 {
		d = s.HiddenSize / s.NumHeads
	}
	h, q, kv := int64(s.HiddenSize), int64(s.NumHeads*d), int64(s.NumKVHeads*d)
	layer := 2*h*q + 2*h*kv + 3*h*int64(s.IntermediateSize) + 2*h
	size := int64(4)
	if dtype == "bf16" {
		size = 2
	}
	return size * (int64(s.NumLayers)*layer + int64(s.VocabSize)*h + h)
}
