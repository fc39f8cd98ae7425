// Package brokenmodel writes small checkpoints broken on purpose, with stories260K's tokenizer and
// testutil.ChatModel's chat template, for the tests of the health checks behind serve and chat.
package brokenmodel

import (
	"fmt"
	"math"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// Layers is the number of decoder layers of the checkpoints.
const Layers = 3

// Write writes an f32 checkpoint (3 layers, hidden size 32, stories260K's 512-token vocabulary, tied
// embeddings) whose named tensors are multiplied by their factor (NaN: all NaN), into a temporary folder, and
// returns it. It skips the test when the shared stories260K folder is absent.
func Write(t testing.TB, scale map[string]float64) string {
	t.Helper()
	tok := testutil.SharedPath(t, "models", "stories260K-hf", "tokenizer.json")
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: Layers, NumHeads: 4, NumKVHeads: 2, VocabSize: 512,
		TieEmbeddings: true, MaxPositionEmbeddings: 128, BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.F32, Seed: 3, Std: 0.2, TensorScale: scale, Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	testutil.WriteChatTemplate(t, dir)
	return dir
}

// Echo writes a checkpoint whose layers add nothing to the residual stream (o_proj and down_proj are zero): with
// tied embeddings each token's logits are largest for itself, so greedy decoding repeats the prompt's last token
// with the same logits at every step, and the saturation (8th step) and repetition (16th) checks fire.
func Echo(t testing.TB) string {
	scale := map[string]float64{}
	for l := range Layers {
		scale[fmt.Sprintf("model.layers.%d.self_attn.o_proj.weight", l)] = 0
		scale[fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", l)] = 0
	}
	return Write(t, scale)
}

// NaN writes a checkpoint whose layer 1 o_proj is NaN: every logit is NaN.
func NaN(t testing.TB) string {
	return Write(t, map[string]float64{"model.layers.1.self_attn.o_proj.weight": math.NaN()})
}
