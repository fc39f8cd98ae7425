package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/shards"
)

// TestDecodeWatch: the warning comes once, after enough loads of encoded units whose decoding after the read
// reaches half the reading, and never for raw units or fast decoding.
func TestDecodeWatch(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	encoded := shards.UnitInfo{Name: "layer.0", DecodeSize: 1 << 20, Tensors: []shards.TensorInfo{{Name: "w", Encoding: shards.Zstd}}}
	raw := shards.UnitInfo{Name: "layer.0"}
	load := func(u shards.UnitInfo, read, decode time.Duration) *shards.Loaded {
		return &shards.Loaded{Unit: u, ReadTime: read, DecodeTime: decode}
	}
	for _, tc := range []struct {
		name  string
		loads []*shards.Loaded
		warn  bool
	}{
		{"raw units", repeat(load(raw, 10*time.Millisecond, 10*time.Millisecond), 20), false},
		{"fast decoding", repeat(load(encoded, 10*time.Millisecond, 4*time.Millisecond), 20), false},
		{"too few loads", repeat(load(encoded, 10*time.Millisecond, 30*time.Millisecond), decodeWatchLoads-1), false},
		{"decoding bounds", repeat(load(encoded, 10*time.Millisecond, 6*time.Millisecond), 20), true},
	} {
		logs.Reset()
		var w decodeWatch
		for _, l := range tc.loads {
			w.add(l)
		}
		got := strings.Count(logs.String(), "bounds the stream")
		if want := map[bool]int{false: 0, true: 1}[tc.warn]; got != want {
			t.Fatalf("%s: %d warnings, want %d: %s", tc.name, got, want, logs.String())
		}
		if tc.warn && (!strings.Contains(logs.String(), sections.Anchor(sections.SlowEncoding)) || !strings.Contains(logs.String(), "zstd")) {
			t.Fatalf("%s: the warning names no section or encoding: %s", tc.name, logs.String())
		}
	}
}

func repeat(l *shards.Loaded, n int) []*shards.Loaded {
	out := make([]*shards.Loaded, n)
	for i := range out {
		out[i] = l
	}
	return out
}
