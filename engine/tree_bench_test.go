package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/testutil"
)

// BenchmarkTreePass times the verification pass of a draft tree (a chain of 8 and 24 leaves, three beside each of
// the first eight positions: 33 rows) on a real model after prompts of 256, 1024 and 4096 tokens, float16 cache,
// resident weights: the model is $LAYERSTREAM_TREE_MODEL (a GGUF or checkpoint; skipped when unset). With
// $LAYERSTREAM_TREE_PROFILE set, the tree passes alone (not the prompts) are profiled into that file with the
// context appended, for the share of attention (kernels' (*attnScratch).tile). Beside the median wall time it
// reports the median of the process's CPU time per pass, steadier on a shared machine (with -cpu 1, the pass's
// own time).
func BenchmarkTreePass(b *testing.B) {
	model := os.Getenv("LAYERSTREAM_TREE_MODEL")
	if model == "" {
		b.Skip("set LAYERSTREAM_TREE_MODEL to a model to time a draft tree's verification on")
	}
	e, err := Open(context.Background(), model, Options{KVCache: KVCacheF16, Resident: true, ShardDir: filepath.Join(b.TempDir(), "s")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	tree := benchTree(e.cfg.VocabSize, 8, 24)
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchTreePass(b, e, n, tree) })
	}
}

// benchTree is a tree of chain tokens and leaves spread evenly over the last token and the chain's positions.
func benchTree(vocab, chain, leaves int) draftTree {
	tree := draftTree{chain: chain}
	for i := range chain + leaves {
		tree.ids = append(tree.ids, (i*7919+13)%vocab)
	}
	for i := range leaves {
		tree.leafParent = append(tree.leafParent, i%chain-1)
	}
	return tree
}

// benchTreePass times tree's verification after a prompt of n tokens (computed once), truncating the cache back
// after each pass.
func benchTreePass(b *testing.B, e *Engine, n int, tree draftTree) {
	ctx := context.Background()
	kv, err := e.run.kvStore(n+64, true)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int, n)
	for i := range prompt {
		prompt[i] = (i*104729 + 7) % e.cfg.VocabSize
	}
	st := e.store.newStream(ctx, -1, false)
	if st != nil {
		defer st.stop()
	}
	if _, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: prompt}}, false); err != nil {
		b.Fatal(err)
	}
	held := kv.Len(0)
	ids := append([]int{prompt[n-1]}, tree.ids...)
	pass := func() {
		if _, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: ids, every: true, tree: &tree}}, false); err != nil {
			b.Fatal(err)
		}
		if err := kv.Truncate(0, held); err != nil {
			b.Fatal(err)
		}
	}
	pass() // warm up
	if path := os.Getenv("LAYERSTREAM_TREE_PROFILE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, n))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	times, cpu := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	for range b.N {
		start, cpu0 := time.Now(), testutil.ProcessCPU()
		pass()
		times, cpu = append(times, time.Since(start)), append(cpu, testutil.ProcessCPU()-cpu0)
	}
	b.StopTimer()
	slices.Sort(times)
	slices.Sort(cpu)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1e3, "ms-median")
	if cpu[len(cpu)/2] > 0 {
		b.ReportMetric(float64(cpu[len(cpu)/2].Microseconds())/1e3, "cpu-ms-median")
	}
}
