package gguf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/quant"
	"github.com/layerstream/layerstream/tokenizer"
)

// t4 varies the tiny Llama file.
type t4 struct {
	extraKV     []KV
	extraTensor string
	qType       quant.Type // type of the attention projections (F32 by default)
	drop        string     // a metadata key to leave out
}

const (
	tinyHidden = 32
	tinyHeads  = 2
	tinyKV     = 1
	tinyFF     = 64
)

// tinyTokens is a SentencePiece-style vocabulary: <unk>, <s>, </s>, byte tokens for 'a' and 'b', then pieces.
var tinyTokens = []string{"<unk>", "<s>", "</s>", "<0x61>", "<0x62>", "▁", "a", "b", "ab", "▁a", "▁ab", "▁b"}

// rowValues fills a [rows, cols] f32 matrix with row r's values all equal to r + col/1000.
func rowValues(rows, cols int) []float32 {
	v := make([]float32, rows*cols)
	for r := range rows {
		for c := range cols {
			v[r*cols+c] = float32(r) + float32(c)/1000
		}
	}
	return v
}

// interleave applies llama.cpp's converter permutation (LlamaModel.permute) to the rows of an f32 matrix.
func interleave(v []float32, rows, cols, heads int) []float32 {
	out := make([]float32, len(v))
	hd := rows / heads
	for h := range heads {
		for t := range 2 {
			for i := range hd / 2 {
				src := h*hd + t*hd/2 + i
				dst := h*hd + 2*i + t
				copy(out[dst*cols:(dst+1)*cols], v[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

func encodeAs(t quant.Type, v []float32) []byte {
	if t == quant.F32 {
		return f32Bytes(v...)
	}
	f, _ := t.Format()
	b := make([]byte, len(v)/f.BlockElems*f.BlockBytes)
	if err := quant.Quantize(t, b, v); err != nil {
		panic(err)
	}
	return b
}

func tinyLlama(o t4) *testFile {
	f := &testFile{}
	kvs := []KV{
		{"general.architecture", Value{Type: TypeString, V: "llama"}},
		{"general.name", Value{Type: TypeString, V: "tiny"}},
		{"llama.block_count", Value{Type: TypeUint32, V: uint32(1)}},
		{"llama.context_length", Value{Type: TypeUint32, V: uint32(128)}},
		{"llama.embedding_length", Value{Type: TypeUint32, V: uint32(tinyHidden)}},
		{"llama.feed_forward_length", Value{Type: TypeUint32, V: uint32(tinyFF)}},
		{"llama.attention.head_count", Value{Type: TypeUint32, V: uint32(tinyHeads)}},
		{"llama.attention.head_count_kv", Value{Type: TypeUint32, V: uint32(tinyKV)}},
		{"llama.rope.freq_base", Value{Type: TypeFloat32, V: float32(500000)}},
		{"llama.attention.layer_norm_rms_epsilon", Value{Type: TypeFloat32, V: float32(1e-6)}},
		{"llama.rope.dimension_count", Value{Type: TypeUint32, V: uint32(tinyHidden / tinyHeads)}},
		{"tokenizer.ggml.model", Value{Type: TypeString, V: "llama"}},
		{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: tinyTokens}},
		{"tokenizer.ggml.scores", Value{Type: TypeArray, Elem: TypeFloat32, V: []float32{0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -7}}},
		{"tokenizer.ggml.token_type", Value{Type: TypeArray, Elem: TypeInt32, V: []int32{2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1}}},
		{"tokenizer.ggml.bos_token_id", Value{Type: TypeUint32, V: uint32(1)}},
		{"tokenizer.ggml.eos_token_id", Value{Type: TypeUint32, V: uint32(2)}},
		{"tokenizer.ggml.unknown_token_id", Value{Type: TypeUint32, V: uint32(0)}},
		{"tokenizer.chat_template", Value{Type: TypeString, V: "{{ messages[0]['content'] }}"}},
	}
	for _, e := range o.extraKV { // replaces a key of the same name, else comes last
		if i := slices.IndexFunc(kvs, func(kv KV) bool { return kv.Key == e.Key }); i >= 0 {
			kvs[i] = e
		} else {
			kvs = append(kvs, e)
		}
	}
	for _, kv := range kvs {
		if kv.Key != o.drop {
			f.kvs = append(f.kvs, kv)
		}
	}
	qt := o.qType
	if qt == 0 {
		qt = quant.F32
	}
	hd := tinyHidden / tinyHeads
	v := len(tinyTokens)
	f.tensor("token_embd.weight", quant.F32, f32Bytes(rowValues(v, tinyHidden)...), tinyHidden, uint64(v))
	f.tensor("output_norm.weight", quant.F32, f32Bytes(rowValues(1, tinyHidden)...), tinyHidden)
	f.tensor("blk.0.attn_norm.weight", quant.F32, f32Bytes(rowValues(1, tinyHidden)...), tinyHidden)
	f.tensor("blk.0.ffn_norm.weight", quant.F32, f32Bytes(rowValues(1, tinyHidden)...), tinyHidden)
	f.tensor("blk.0.attn_q.weight", qt, encodeAs(qt, interleave(rowValues(tinyHidden, tinyHidden), tinyHidden, tinyHidden, tinyHeads)), tinyHidden, tinyHidden)
	f.tensor("blk.0.attn_k.weight", qt, encodeAs(qt, interleave(rowValues(tinyKV*hd, tinyHidden), tinyKV*hd, tinyHidden, tinyKV)), tinyHidden, uint64(tinyKV*hd))
	f.tensor("blk.0.attn_v.weight", qt, encodeAs(qt, rowValues(tinyKV*hd, tinyHidden)), tinyHidden, uint64(tinyKV*hd))
	f.tensor("blk.0.attn_output.weight", qt, encodeAs(qt, rowValues(tinyHidden, tinyHidden)), tinyHidden, tinyHidden)
	f.tensor("blk.0.ffn_gate.weight", quant.F32, f32Bytes(rowValues(tinyFF, tinyHidden)...), tinyHidden, tinyFF)
	f.tensor("blk.0.ffn_up.weight", quant.F32, f32Bytes(rowValues(tinyFF, tinyHidden)...), tinyHidden, tinyFF)
	f.tensor("blk.0.ffn_down.weight", quant.F32, f32Bytes(rowValues(tinyHidden, tinyFF)...), tinyFF, tinyHidden)
	if o.extraTensor != "" {
		f.tensor(o.extraTensor, quant.F32, f32Bytes(1, 2), 2)
	}
	return f
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckpointTinyLlama(t *testing.T) {
	for _, qt := range []quant.Type{quant.F32, quant.Q8_0} {
		path := writeTemp(t, tinyLlama(t4{qType: qt}).bytes())
		if !IsGGUF(path) || IsGGUF(filepath.Dir(path)) {
			t.Fatal("IsGGUF")
		}
		ck, err := OpenCheckpoint(path)
		if err != nil {
			t.Fatal(err)
		}
		c := ck.Config
		if c.Arch.Name != "LlamaForCausalLM" || c.HiddenSize != tinyHidden || c.NumAttentionHeads != tinyHeads ||
			c.NumKeyValueHeads != tinyKV || c.HeadDim != tinyHidden/tinyHeads || c.IntermediateSize != tinyFF ||
			c.NumHiddenLayers != 1 || c.VocabSize != len(tinyTokens) || c.Rope.Theta != 500000 || float32(c.RMSNormEps) != 1e-6 ||
			!c.TieWordEmbeddings || c.MaxPositionEmbeddings != 128 {
			t.Fatalf("config %+v", c)
		}
		if len(ck.Tensors) != 11 {
			t.Fatalf("%d tensors", len(ck.Tensors))
		}
		// q and k come back in Hugging Face's row order: row r holds r + col/1000 (after dequantizing).
		for _, name := range []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"} {
			ti, ok := ck.Tensor(name)
			if !ok {
				t.Fatalf("no %s", name)
			}
			if ti.DType != checkpoint.DTypeOf(qt) {
				t.Fatalf("%s is %s, want %s", name, ti.DType, qt)
			}
			raw := make([]byte, ti.Length)
			if err := checkpoint.ReadTensorAt(ti, raw); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, ti.Shape[0]*ti.Shape[1])
			if err := checkpoint.ToF32(got, raw, ti.DType); err != nil {
				t.Fatal(err)
			}
			for r := range int(ti.Shape[0]) {
				if v := got[r*tinyHidden+tinyHidden-1]; v < float32(r) || v > float32(r)+0.05 {
					t.Fatalf("%s (%s) row %d holds %g: rows not in Hugging Face order", name, qt, r, v)
				}
			}
		}
		files, err := ck.Files()
		if err != nil {
			t.Fatal(err)
		}
		var gen struct {
			EOSTokenID []int `json:"eos_token_id"`
		}
		if err := json.Unmarshal(files["generation_config.json"], &gen); err != nil || !slices.Equal(gen.EOSTokenID, []int{2}) {
			t.Fatalf("generation_config.json %s (%v)", files["generation_config.json"], err)
		}
		if string(files["chat_template.jinja"]) != "{{ messages[0]['content'] }}" {
			t.Fatalf("chat template %q", files["chat_template.jinja"])
		}
	}
}

// TestCheckpointRefuses checks that keys, tensors and values layerstream does not implement are refused by name.
func TestCheckpointRefuses(t *testing.T) {
	kv := func(k string, v Value) t4 { return t4{extraKV: []KV{{k, v}}} }
	cases := []struct {
		o    t4
		want string
	}{
		{kv("llama.attention.clamp_kqv", Value{Type: TypeFloat32, V: float32(8)}), "llama.attention.clamp_kqv is not supported"},
		{kv("llama.logit_scale", Value{Type: TypeFloat32, V: float32(2)}), "llama.logit_scale"},
		{kv("llama.expert_count", Value{Type: TypeUint32, V: uint32(8)}), "a mixture of experts needs 1 ≤ experts per token ≤ experts"},
		{kv("llama.expert_group_count", Value{Type: TypeUint32, V: uint32(4)}), "group-limited expert routing is not supported"},
		{kv("llama.nextn_predict_layers", Value{Type: TypeUint32, V: uint32(1)}), "multi-token-prediction layers are not supported for llama"},
		{kv("llama.rope.scaling.type", Value{Type: TypeString, V: "longrope"}), `"longrope" is not supported`},
		{kv("llama.attention.causal", Value{Type: TypeBool, V: false}), "non-causal"},
		{kv("llama.pooling_type", Value{Type: TypeUint32, V: uint32(3)}), "llama.pooling_type is 3: an embedding or reranking model"},
		{kv("split.count", Value{Type: TypeUint16, V: uint16(3)}), "split over several GGUF files"},
		{kv("general.type", Value{Type: TypeString, V: "adapter"}), "only model files"},
		{kv("mystery.key", Value{Type: TypeUint32, V: uint32(1)}), "mystery.key is not supported"},
		{kv("llama.attention.value_length", Value{Type: TypeUint32, V: uint32(8)}), "value_length"},
		{kv("llama.rope.dimension_count", Value{Type: TypeUint32, V: uint32(8)}), "partial rotary"},
		{kv("llama.vocab_size", Value{Type: TypeUint32, V: uint32(99)}), "llama.vocab_size is 99"},
		{kv("tokenizer.ggml.eos_token_id", Value{Type: TypeUint32, V: uint32(500)}), "tokenizer.ggml.eos_token_id is 500"},
		{t4{extraTensor: "rope_freqs.weight"}, `tensor "rope_freqs.weight" has shape [2], want [8] (one factor per rotated pair)`},
		{t4{extraTensor: "rope_freqs.weight", extraKV: []KV{{"llama.rope.scaling.type", Value{Type: TypeString, V: "linear"}},
			{"llama.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(2)}}}}, "both scale the rotary frequencies"},
		{kv("llama.rope.scaling.yarn_beta_fast", Value{Type: TypeFloat32, V: float32(16)}), "yarn_beta_fast is 16: only 32 is supported"},
		{kv("llama.rope.scaling.attn_factor", Value{Type: TypeFloat32, V: float32(0.5)}), "attn_factor is 0.5"},
		{kv("llama.rope.scaling.yarn_log_multiplier", Value{Type: TypeFloat32, V: float32(0.1)}), "yarn_log_multiplier is not supported"},
		{t4{extraTensor: "blk.0.attn_q_norm.weight"}, `"blk.0.attn_q_norm.weight" is not supported`},
		{t4{drop: "llama.embedding_length"}, "llama.embedding_length is missing"},
		{t4{drop: "llama.attention.layer_norm_rms_epsilon"}, "layer_norm_rms_epsilon is missing"},
		{t4{drop: "tokenizer.ggml.model"}, "no tokenizer.ggml.model"},
		{kv("llama.attention.head_count_kv", Value{Type: TypeString, V: "1"}), "head_count_kv: want an integer"},
		{kv("general.architecture", Value{Type: TypeString, V: "mamba"}), `"mamba" is not supported`},
	}
	for _, c := range cases {
		g, err := Open(writeTemp(t, tinyLlama(c.o).bytes())) // on disk: rope_freqs.weight's values are read
		if err == nil {
			_, err = checkpointAndFiles(g)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// TestRopeScalingWithoutType: a rope.scaling.factor without rope.scaling.type is linear scaling, as llama.cpp reads
// it (it defaults the type to "linear"), and a factor of 0 is none; the file's config.json says so.
func TestRopeScalingWithoutType(t *testing.T) {
	for _, c := range []struct {
		kvs  []KV
		want string
	}{
		{[]KV{{"llama.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(4)}}}, `{"factor":4,"rope_type":"linear"}`},
		{[]KV{{"llama.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(0)}}}, ""},
		{[]KV{{"llama.rope.scaling.type", Value{Type: TypeString, V: "linear"}}, {"llama.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(0)}}}, ""},
		{[]KV{{"llama.rope.scaling.type", Value{Type: TypeString, V: "none"}}, {"llama.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(4)}}}, ""},
	} {
		g, err := Open(writeTemp(t, tinyLlama(t4{extraKV: c.kvs}).bytes()))
		if err != nil {
			t.Fatal(err)
		}
		ck, err := g.Checkpoint()
		if err != nil {
			t.Fatalf("%v: %v", c.kvs, err)
		}
		var cfg struct {
			RopeScaling json.RawMessage `json:"rope_scaling"`
		}
		files, err := ck.Files()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(files["config.json"], &cfg); err != nil {
			t.Fatal(err)
		}
		got := ""
		if cfg.RopeScaling != nil {
			var v any
			json.Unmarshal(cfg.RopeScaling, &v)
			b, _ := json.Marshal(v)
			got = string(b)
		}
		if got != c.want {
			t.Errorf("%v: rope_scaling %s, want %s", c.kvs, got, c.want)
		}
	}
}

// TestPoolingNoneAccepted: pooling_type 0 (none) is a language model.
func TestPoolingNoneAccepted(t *testing.T) {
	g, err := Open(writeTemp(t, tinyLlama(t4{extraKV: []KV{{"llama.pooling_type", Value{Type: TypeUint32, V: uint32(0)}}}}).bytes()))
	if err == nil {
		_, err = g.Checkpoint()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestSentencePieceTokenizer checks the BPE made from a SentencePiece vocabulary: the highest-scoring merges
// first, byte fallback for characters outside the vocabulary, BOS added as llama.cpp does.
func TestSentencePieceTokenizer(t *testing.T) {
	g, err := parseBytes(t, tinyLlama(t4{}).bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, cfg, _, err := g.TokenizerFiles()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string][]int{
		"ab":  {1, 10},    // "▁ab": a+b (score -4) merges before ▁+a (-5), then ▁+ab
		"a b": {1, 9, 11}, // ▁a ▁b
		"ba":  {1, 11, 6}, // ▁b a
		"abc": {1, 10, 0}, // c is unknown: no byte token for it
		" ab": {1, 5, 10}, // "▁▁ab": the first ▁ stays alone
	} {
		ids, err := tk.Encode(text, true)
		if err != nil || !slices.Equal(ids, want) {
			t.Errorf("Encode(%q) = %v (%v), want %v", text, ids, err, want)
		}
	}
	if got := tk.Decode([]int{1, 9, 11}, true); got != "a b" {
		t.Errorf("Decode = %q", got)
	}
}

// TestSmolLM2Metadata reads the real SmolLM2 Q4_1 file when present.
func TestSmolLM2Metadata(t *testing.T) {
	path := hffixture.SmolLM2GGUF(t)
	ck, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.NumHiddenLayers != 30 || c.HiddenSize != 576 || c.NumAttentionHeads != 9 || c.NumKeyValueHeads != 3 ||
		c.VocabSize != 49152 || c.Rope.Theta != 100000 || !c.TieWordEmbeddings {
		t.Fatalf("config %+v", c)
	}
	counts := map[checkpoint.DType]int{}
	for _, ti := range ck.Tensors {
		counts[ti.DType]++
	}
	if counts[checkpoint.Q4_1] != 210 || counts[checkpoint.Q8_0] != 1 || counts[checkpoint.F32] != 61 {
		t.Fatalf("dtypes %v", counts)
	}
}

// TestOpenCheckpointNamesTheSection: a file OpenCheckpoint refuses (here one cut short, as an interrupted download
// is) gets an error naming the tensor and the TROUBLESHOOTING.md section.
func TestOpenCheckpointNamesTheSection(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "tiny", "tiny-llama-Q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cut.gguf")
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenCheckpoint(path)
	if err == nil || !strings.Contains(err.Error(), "lie outside") || !strings.Contains(err.Error(), "TROUBLESHOOTING.md#gguf-file-refused") {
		t.Errorf("got %v", err)
	}
}

// checkpointAndFiles is g.Checkpoint and then the making of its files (tokenizer.json among them), which a split
// does before it writes anything: every refusal of a file's metadata happens in one of the two.
func checkpointAndFiles(g *File) (*checkpoint.Checkpoint, error) {
	ck, err := g.Checkpoint()
	if err != nil {
		return nil, err
	}
	if _, err := ck.Files(); err != nil {
		return nil, err
	}
	return ck, nil
}

// openCheckpointAndFiles is checkpointAndFiles for OpenCheckpoint, with its errors' wording.
func openCheckpointAndFiles(path string) (*checkpoint.Checkpoint, error) {
	ck, err := OpenCheckpoint(path)
	if err != nil {
		return nil, err
	}
	if _, err := ck.Files(); err != nil {
		return nil, err
	}
	return ck, nil
}
