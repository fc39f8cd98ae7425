package checkpoint

import (
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

func TestOpenStories(t *testing.T) {
	c, err := Open(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.NumHiddenLayers != 5 || c.Config.NumKeyValueHeads != 4 || !c.Config.TieWordEmbeddings {
		t.Fatalf("config: %+v", c.Config)
	}
	if got := EOSTokenIDs(c.Config, c.Generation); len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("eos ids %v, want [2 1]", got)
	}
	if len(c.Tensors) != 1+5*9+1 {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
	emb, err := c.ReadF32("model.embed_tokens.weight")
	if err != nil || len(emb) != 512*64 {
		t.Fatal(len(emb), err)
	}
}
