// Package shards splits a checkpoint into one shard file per unit (embed, layer.N, norm, lm_head) plus a Parquet
// manifest, and loads a unit with one sequential pass into a reused, page-aligned buffer, verifying every
// tensor's CRC-32C as the bytes come in and before handing the tensors out. See format.go for the shard file
// layout.
package shards

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/checkpoint"
)

// Set is an opened shard folder.
type Set struct {
	Dir        string
	Config     *checkpoint.Config
	Generation *checkpoint.GenerationConfig

	units  []UnitInfo
	byName map[string]int
	source *Source // nil for a split made before splits recorded their source

	direct   atomic.Bool
	warnOnce sync.Once

	noMap       atomic.Bool // Map loads instead: mapping failed here once
	mapWarnOnce sync.Once
	keepMapped  atomic.Bool
	mapsMu      sync.Mutex
	kept        map[string]keptMap // unit → the mapping of its file as last mapped (SetKeepMapped)
	retired     []retiredMap       // kept mappings of files replaced since: unmapped by Close

	policy     atomic.Int32 // a VerifyPolicy
	verifiedMu sync.Mutex
	verified   map[string]os.FileInfo // unit → its shard file as last verified (VerifyOnce)

	decOnce sync.Once
	dec     *zstd.Decoder
	decErr  error

	pinMu  sync.Mutex
	pinned map[string]*os.File // unit → its shard file, opened by Pin; closed by Close
}

// UnitInfo describes one unit's shard file.
type UnitInfo struct {
	Name  string // "embed", "layer.N", "norm" or "lm_head"
	Layer int    // N for layer.N, -1 for the other units
	File  string // shard file name inside the set's folder
	// FileSize is the shard file's size (a multiple of 4096); DecodeSize the decode area that its encoded
	// tensors need (0 when all are raw). Load needs a Buffer of BufferSize() = FileSize + DecodeSize bytes.
	FileSize, DecodeSize int64
	Tensors              []TensorInfo // in file order
}

// BufferSize is the Buffer capacity Load needs for this unit.
func (u UnitInfo) BufferSize() int64 { return u.FileSize + u.DecodeSize }

// Bytes is the total decoded size of the unit's tensors.
func (u UnitInfo) Bytes() int64 {
	var n int64
	for _, t := range u.Tensors {
		n += t.Length
	}
	return n
}

// Tensor is one loaded tensor. Data aliases the Buffer passed to Load: it is valid until the Buffer is reused.
// Data starts at a 64-byte-aligned address.
type Tensor struct {
	Name  string
	DType checkpoint.DType
	Shape []int64
	Data  []byte
}

// Loaded is the result of Load.
type Loaded struct {
	Unit    UnitInfo
	Tensors map[string]Tensor
	// ReadBytes is the number of bytes read from disk. ReadTime is the time from the start of Load until the
	// last byte was read; checksums and decompression run during the read, on the pieces already read.
	// DecodeTime is the time spent after the read: the file's table, then the checks not finished by then.
	ReadBytes  int64
	ReadTime   time.Duration
	DecodeTime time.Duration
	// Verified reports whether this Load checked the checksums (false: skipped under VerifyOnce).
	Verified bool
}

// IsSet reports whether dir holds a complete split (its manifest exists).
func IsSet(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil && st.Mode().IsRegular()
}

// Open reads a shard folder: manifest.parquet and the copied config.json and generation_config.json.
func Open(dir string) (*Set, error) {
	units, src, err := readManifest(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shards %s: no %s: not a shard folder, or a split that did not finish (run layerstream split again)", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	cfg, err := checkpoint.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	gen, err := checkpoint.LoadGenerationConfig(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	s := &Set{Dir: dir, Config: cfg, Generation: gen, units: units, byName: map[string]int{}, source: src}
	for i, u := range units {
		s.byName[u.Name] = i
	}
	if err := checkUnits(units, cfg.NumHiddenLayers); err != nil {
		return nil, fmt.Errorf("shards %s: %w", dir, err)
	}
	return s, nil
}

// checkUnits checks that units are embed, layer.0..layer.N-1, norm and optionally lm_head, in that order.
func checkUnits(units []UnitInfo, layers int) error {
	var names []string
	for _, u := range units {
		names = append(names, u.Name)
	}
	want := []string{"embed"}
	for l := range layers {
		want = append(want, fmt.Sprintf("layer.%d", l))
	}
	want = append(want, "norm")
	got := strings.Join(names, ",")
	if w := strings.Join(want, ","); got != w && got != w+",lm_head" {
		return fmt.Errorf("units %s do not match a %d-layer model (want embed, layer.0..layer.%d, norm and optionally lm_head)", got, layers, layers-1)
	}
	return nil
}

// Source returns what the split was made from, or nil for a split made by a layerstream that did not record it.
func (s *Set) Source() *Source { return s.source }

// Units lists the units in model order: embed, layer.0 .. layer.N-1, norm, then lm_head when present.
func (s *Set) Units() []UnitInfo { return s.units }

// Unit returns the named unit.
func (s *Set) Unit(name string) (UnitInfo, bool) {
	i, ok := s.byName[name]
	if !ok {
		return UnitInfo{}, false
	}
	return s.units[i], true
}

// MaxBufferSize is the largest BufferSize over the units: a Buffer this big serves every Load.
func (s *Set) MaxBufferSize() int64 {
	var n int64
	for _, u := range s.units {
		n = max(n, u.BufferSize())
	}
	return n
}

// FileBytes is the size of every unit's shard file together: the split's bytes on disk.
func (s *Set) FileBytes() int64 {
	var n int64
	for _, u := range s.units {
		n += u.FileSize
	}
	return n
}

// SetDirectIO makes Load read with O_DIRECT, bypassing the page cache (shard files are padded to whole pages and
// Buffers are page-aligned, as O_DIRECT requires). Where the filesystem refuses O_DIRECT (tmpfs, some network
// filesystems) Load logs one warning and reads normally.
func (s *Set) SetDirectIO(on bool) { s.direct.Store(on) }

// VerifyPolicy says when Load checks the CRC-32C of a shard's tensors.
type VerifyPolicy int32

const (
	// VerifyAlways checks every tensor's checksum on every Load: the default.
	VerifyAlways VerifyPolicy = iota
	// VerifyOnce checks a shard's checksums on its first Load in this process, and skips them on later Loads
	// while the file is unchanged: same device and inode, size, modification time and (where the platform has
	// one) status-change time, taken with a Stat of the opened file before it is read. Every Load still checks
	// the file's size and its table against the manifest, and decompression still fails on a damaged zstd frame.
	//
	// The trade-off: the engine streams the same shards every token, mostly from the page cache, where
	// re-checking unchanged bytes costs as much CPU as the read itself. A file rewritten or replaced after its
	// check gets a new identity and is verified again; what goes unnoticed is a change that keeps the identity:
	// an in-place rewrite within the filesystem's timestamp granularity that also keeps the size, a change to
	// the bytes that bypasses the filesystem, or memory corruption of the cached pages.
	VerifyOnce
)

// String names the policy.
func (p VerifyPolicy) String() string {
	switch p {
	case VerifyAlways:
		return "always"
	case VerifyOnce:
		return "once"
	}
	return fmt.Sprintf("VerifyPolicy(%d)", int32(p))
}

// SetVerify sets when Load checks checksums: VerifyAlways (the default) or VerifyOnce. Verify checks every
// checksum whatever the policy.
func (s *Set) SetVerify(p VerifyPolicy) { s.policy.Store(int32(p)) }

// verifiedAs reports whether unit's shard was verified in this process and st shows the same, unchanged file.
func (s *Set) verifiedAs(unit string, st os.FileInfo) bool {
	s.verifiedMu.Lock()
	old, ok := s.verified[unit]
	s.verifiedMu.Unlock()
	return ok && sameFile(old, st)
}

// sameFile reports whether a and b describe the same, unchanged file: same device and inode, size, modification
// time and (where the platform has one) status-change time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && changeTime(a) == changeTime(b)
}

// markVerified records that unit's shard, as st describes it, passed every checksum (st == nil: forget it).
func (s *Set) markVerified(unit string, st os.FileInfo) {
	s.verifiedMu.Lock()
	defer s.verifiedMu.Unlock()
	if st == nil {
		delete(s.verified, unit)
		return
	}
	if s.verified == nil {
		s.verified = map[string]os.FileInfo{}
	}
	s.verified[unit] = st
}

// Experts is the number of routed experts whose tensors the unit lays out apart (one more than the largest
// TensorInfo.Expert; 0: none).
func (u UnitInfo) Experts() int {
	n := 0
	for _, t := range u.Tensors {
		n = max(n, t.Expert()+1)
	}
	return n
}

// Part returns the tensors of expert e, or with NoExpert those of no expert: what LoadPart reads.
func (u UnitInfo) Part(e int) []TensorInfo {
	var ts []TensorInfo
	for _, t := range u.Tensors {
		if t.Expert() == e {
			ts = append(ts, t)
		}
	}
	return ts
}

// partRange is the page-aligned byte range of the shard file that holds tensors (in file order).
func partRange(tensors []TensorInfo) (lo, hi int64) {
	first, last := tensors[0], tensors[len(tensors)-1]
	return first.Offset / pageSize * pageSize, alignUp(last.Offset+last.EncodedLength, pageSize)
}

// PartBytes is the number of bytes LoadPart reads for expert e (NoExpert: the tensors of no expert).
func (u UnitInfo) PartBytes(e int) int64 {
	ts := u.Part(e)
	if len(ts) == 0 {
		return 0
	}
	lo, hi := partRange(ts)
	return hi - lo
}
