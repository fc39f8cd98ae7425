package gguf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// moeInfo is what a mixture-of-experts architecture's file holds beyond the dense tensors. llama.cpp's converter
// stores a layer's routed experts fused, blk.N.ffn_{gate,up,down}_exps.weight (ggml ne [in, out, experts]: per
// expert an [out, in] row-major matrix of whole quantized rows), which the checkpoint cuts into one tensor per
// expert under the Hugging Face names (checkpoint.SplitExperts: views of the fused bytes), so that the split,
// the expert streaming and the model see what they see for safetensors. The router (ffn_gate_inp), shared
// expert (ffn_*_shexp), its gate (ffn_gate_inp_shexp) and choice bias (exp_probs_b) are the architecture's names.
type moeInfo struct {
	// countKey is the config.json key of the number of routed experts in the family's spelling
	// (num_local_experts, num_experts, n_routed_experts).
	countKey string
	// experts maps the fused tensors (ffn_gate_exps.weight...) to each expert's Hugging Face name after the
	// layer's prefix, %d standing for the expert; a fused tensor mapped to "" is read as the second part of its
	// gateUp tensor instead.
	experts map[string]string
	// gateUp maps a fused gate tensor (ffn_gate_exps.weight, .bias) to its up tensor: each expert's gate and up
	// read as one tensor (named by experts), the gate rows then the up rows (gpt-oss's gate_up_proj:
	// checkpoint.TensorInfo.Second).
	gateUp map[string]string
	// optional: a file without expert_count is the architecture's dense model (llama); otherwise llama.cpp
	// requires it.
	optional bool
	// groups: expert_group_count and expert_group_used_count (group-limited routing, which llama.cpp applies to
	// any architecture) are the family's n_group and topk_group; elsewhere more than one group is refused.
	groups bool
}

// Expert names of the two spellings the families use.
var (
	qwenExperts = map[string]string{"ffn_gate_exps.weight": "mlp.experts.%d.gate_proj.weight",
		"ffn_up_exps.weight": "mlp.experts.%d.up_proj.weight", "ffn_down_exps.weight": "mlp.experts.%d.down_proj.weight"}
	mixtralExperts = map[string]string{"ffn_gate_exps.weight": "block_sparse_moe.experts.%d.w1.weight",
		"ffn_up_exps.weight": "block_sparse_moe.experts.%d.w3.weight", "ffn_down_exps.weight": "block_sparse_moe.experts.%d.w2.weight"}
)

// moeConfig reads the shared expert keys into cfg: the number of experts (in the family's spelling) and of
// experts per token, refusing them for an architecture without experts, group-limited routing
// (expert_group_count above 1, which llama.cpp applies to any architecture) and multi-token-prediction layers
// where the architecture has none. The architecture's config reads its own keys after.
func (g *File) moeConfig(arch string, info archInfo, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	n, hasN, err := g.Uint(key("expert_count"))
	if err != nil {
		return err
	}
	used, hasUsed, err := g.Uint(key("expert_used_count"))
	if err != nil {
		return err
	}
	if info.moe == nil {
		for _, v := range []struct {
			k string
			n uint64
		}{{"expert_count", n}, {"expert_used_count", used}} {
			if v.n != 0 {
				return fmt.Errorf("metadata %s is %d: llama.cpp's %s architecture has no routed experts that layerstream reads (mixture-of-experts GGUF files are read for %s)", key(v.k), v.n, arch, strings.Join(moeArchs(), ", "))
			}
		}
	} else if hasN && n > 0 || !info.moe.optional {
		if !hasN || n == 0 || !hasUsed || used == 0 || used > n {
			return fmt.Errorf("metadata %s (%d) and %s (%d): a mixture of experts needs 1 ≤ experts per token ≤ experts (llama.cpp requires both)", key("expert_count"), n, key("expert_used_count"), used)
		}
		cfg[info.moe.countKey], cfg["num_experts_per_tok"] = int(n), int(used)
	}
	if err := g.expertGroups(arch, info, cfg); err != nil {
		return err
	}
	if v, ok, err := g.Int(key("nextn_predict_layers")); err != nil {
		return err
	} else if ok && v != 0 {
		layers := cfg["num_hidden_layers"].(int)
		if !info.nextn || v < 0 || v >= layers {
			return fmt.Errorf("metadata %s is %d (of %d blocks): multi-token-prediction layers are not supported for %s", key("nextn_predict_layers"), v, layers, arch)
		}
		cfg["num_hidden_layers"] = layers - v
		if info.nextnKey != "" {
			cfg[info.nextnKey] = v
		}
	}
	return nil
}

// moeArchs is the architectures whose routed experts layerstream reads, sorted.
func moeArchs() []string {
	var names []string
	for name, a := range archs {
		if a.moe != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// expertGroups reads group-limited routing, llama.cpp's expert_group_count groups of consecutive experts of
// which the expert_group_used_count best (by the sum of their two best biased scores) hold the choice, into
// n_group and topk_group for a family that implements it (moeInfo.groups); elsewhere more than one group is
// refused. llama.cpp requires 0 < used < groups where groups > 1.
func (g *File) expertGroups(arch string, info archInfo, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	groups, _, err := g.Uint(key("expert_group_count"))
	if err != nil {
		return err
	}
	used, _, err := g.Uint(key("expert_group_used_count"))
	if err != nil {
		return err
	}
	if groups <= 1 && used <= 1 {
		return nil
	}
	if info.moe == nil || !info.moe.groups {
		return fmt.Errorf("metadata %s is %d, %s %d: group-limited expert routing is not supported for %s", key("expert_group_count"), groups, key("expert_group_used_count"), used, arch)
	}
	if used == 0 || used >= groups {
		return fmt.Errorf("metadata %s is %d of %s %d groups: want at least 1 and fewer than the groups (llama.cpp requires it)", key("expert_group_used_count"), used, key("expert_group_count"), groups)
	}
	cfg["n_group"], cfg["topk_group"] = int(groups), int(used)
	return nil
}

// moeTensors returns t's per-expert tensors where t is one of the architecture's fused experts (prefix: the
// layer's Hugging Face prefix, "model.layers.N."), with ok false where it is not.
func (a archInfo) moeTensors(g *File, t TensorInfo, ct checkpoint.TensorInfo, prefix, part string) ([]checkpoint.TensorInfo, bool, error) {
	if a.moe == nil {
		return nil, false, nil
	}
	name, ok := a.moe.experts[part]
	if !ok {
		return nil, false, nil
	}
	if name == "" { // the up part of a gateUp pair: its gate part reads it
		return nil, true, nil
	}
	if dims := 3 - strings.Count(part, ".bias"); len(t.Dims) != dims {
		return nil, true, fmt.Errorf("tensor %q has %d dimensions, want %d ([in, out, experts], or a bias [out, experts])", t.Name, len(t.Dims), dims)
	}
	out, err := checkpoint.SplitExperts(ct, prefix+name, false, false)
	if err != nil || a.moe.gateUp[part] == "" {
		return out, true, err
	}
	return pairGateUp(g, t, a.moe.gateUp[part], out)
}

// pairGateUp makes each expert's tensor of out (cut from the fused gate tensor t) its gate rows then its up rows:
// the same expert's slice of t's up tensor (up: its part name) as the tensor's second range.
func pairGateUp(g *File, t TensorInfo, up string, out []checkpoint.TensorInfo) ([]checkpoint.TensorInfo, bool, error) {
	upName := t.Name[:strings.Index(t.Name, ".ffn_")+1] + up
	u, ok := g.Tensor(upName)
	if !ok || u.Type != t.Type || !slices.Equal(u.Dims, t.Dims) || u.Path != t.Path {
		return nil, true, fmt.Errorf("tensor %q has no %q of its type and shape in its file: its experts' gate and up projections are read together", t.Name, upName)
	}
	per := u.Size / int64(len(out))
	for e := range out {
		out[e].Shape = append([]int64{2 * out[e].Shape[0]}, out[e].Shape[1:]...)
		out[e].Second = checkpoint.Range{Offset: u.Offset + int64(e)*per, Length: per}
		out[e].Length += per
	}
	return out, true, nil
}

// layerOf splits a tensor name blk.N.<part> into N and part (ok false for a global tensor).
func layerOf(name string) (n int, part string, ok bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, "", false
	}
	num, part, found := strings.Cut(rest, ".")
	n, err := strconv.Atoi(num)
	if !found || err != nil || n < 0 || strconv.Itoa(n) != num {
		return 0, "", false
	}
	return n, part, true
}

// moeShape is the Hugging Face shape of a mixture-of-experts tensor (nil for any other): the router [experts,
// hidden], its choice bias [experts], the routed experts' matrices (intermediate size moe_intermediate_size
// where the family has one, else intermediate_size), the shared expert's and its gate [1, hidden].
func moeShape(hf string, c *checkpoint.Config) []int64 {
	h, e := int64(c.HiddenSize), int64(c.NumExperts)
	inter := int64(c.IntermediateSize)
	if c.MoEIntermediateSize > 0 {
		inter = int64(c.MoEIntermediateSize)
	}
	shared := int64(c.SharedExpertIntermediateSize)
	if c.NSharedExperts > 0 {
		shared = int64(c.NSharedExperts) * inter
	}
	matrix := func(rows int64, name string) []int64 {
		switch {
		case strings.HasSuffix(name, "gate_up_proj.weight"):
			return []int64{2 * rows, h}
		case strings.HasSuffix(name, "gate_up_proj.bias"):
			return []int64{2 * rows}
		case strings.HasSuffix(name, "down_proj.bias"):
			return []int64{h}
		case strings.HasSuffix(name, "gate_proj.weight"), strings.HasSuffix(name, "up_proj.weight"),
			strings.HasSuffix(name, ".w1.weight"), strings.HasSuffix(name, ".w3.weight"):
			return []int64{rows, h}
		case strings.HasSuffix(name, "down_proj.weight"), strings.HasSuffix(name, ".w2.weight"):
			return []int64{h, rows}
		}
		return nil
	}
	switch {
	case strings.HasSuffix(hf, ".mlp.gate.weight"), strings.HasSuffix(hf, ".block_sparse_moe.gate.weight"), strings.HasSuffix(hf, ".mlp.router.weight"):
		return []int64{e, h}
	case strings.HasSuffix(hf, "e_score_correction_bias"), strings.HasSuffix(hf, ".mlp.router.bias"):
		return []int64{e}
	case strings.HasSuffix(hf, ".self_attn.sinks"):
		return []int64{int64(c.NumAttentionHeads)}
	case strings.HasSuffix(hf, ".shared_expert_gate.weight"):
		return []int64{1, h}
	case strings.Contains(hf, ".experts."):
		return matrix(inter, hf)
	case strings.Contains(hf, ".shared_expert.") || strings.Contains(hf, ".shared_experts."):
		return matrix(shared, hf)
	}
	return nil
}
