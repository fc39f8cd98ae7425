package shards

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/layerstream/layerstream/checkpoint"
)

// Source records what a split was made from, so that a changed checkpoint is noticed: the checkpoint folder,
// the identity and a content hash of every file of it that the split read or copied, and a content hash of each
// unit's source tensors. The manifest holds it (Parquet key-value metadata "layerstream.source", as JSON).
//
// Checking a split against its checkpoint is cheap while nothing changed: a stat of each file. A file whose
// identity changed (size, modification or status-change time, device or inode) is hashed again: config and
// tokenizer files whole, weight files' safetensors headers, and then the tensors of every unit stored in that
// file, as the split hashed them while it copied them. Only units whose tensors hash differently are split again.
type Source struct {
	Checkpoint string       `json:"checkpoint"` // absolute path of the checkpoint folder
	Files      []SourceFile `json:"files"`
	// Units maps each unit to the hash of its source tensors (tensorHasher: XXH3-128 over each tensor's name,
	// dtype, shape and length and its bytes, in shard order), in hex.
	Units map[string]string `json:"units"`
	// Quantizer names the encoder of the tensors the split quantized (Quantization.encoder), empty when it
	// quantized none: shards quantized by another encoder are quantized again.
	Quantizer string `json:"quantizer,omitempty"`
}

// SourceFile is the identity and content hash of one checkpoint file.
type SourceFile struct {
	Name string `json:"name"` // relative to the checkpoint folder
	// Absent records a file the split looked for (a config or tokenizer file) that did not exist.
	Absent bool `json:"absent,omitempty"`
	// Weights marks a safetensors file: SHA256 then covers its header only; the tensors are hashed per unit.
	Weights bool   `json:"weights,omitempty"`
	Size    int64  `json:"size"`
	MTime   int64  `json:"mtime_ns"`
	CTime   int64  `json:"ctime_ns,omitempty"`
	Dev     uint64 `json:"dev,omitempty"`
	Inode   uint64 `json:"inode,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// sourceKey is the manifest's key-value metadata entry holding the Source as JSON.
const sourceKey = "layerstream.source"

// maxSourceFiles bounds the files a Source may list (a checkpoint has a handful, or a few hundred weight files).
const maxSourceFiles = 1 << 16

// parseSource decodes and validates a Source read from a manifest.
func parseSource(js string) (*Source, error) {
	var s Source
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("source record: %w", err)
	}
	if d.More() {
		return nil, errors.New("source record: data after the JSON object")
	}
	if len(s.Files) > maxSourceFiles {
		return nil, fmt.Errorf("source record: %d files", len(s.Files))
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) || f.Name == "." || f.Name == ".." || seen[f.Name] {
			return nil, fmt.Errorf("source record: file name %q is empty, not a plain name, or repeated", f.Name)
		}
		seen[f.Name] = true
		if f.SHA256 != "" && !isSHA256(f.SHA256) {
			return nil, fmt.Errorf("source record: file %s: %q is not a SHA-256", f.Name, f.SHA256)
		}
	}
	for u, h := range s.Units {
		if _, ok := unitLayer(u); !ok || !isHex(h, 16) {
			return nil, fmt.Errorf("source record: unit %q hash %q", u, h)
		}
	}
	return &s, nil
}

func isSHA256(s string) bool { return isHex(s, sha256.Size) }

// isHex reports whether s is n bytes in lower-case hex.
func isHex(s string, n int) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == n && strings.ToLower(s) == s
}

// file returns the recorded entry for name.
func (s *Source) file(name string) (SourceFile, bool) {
	if s == nil {
		return SourceFile{}, false
	}
	i := slices.IndexFunc(s.Files, func(f SourceFile) bool { return f.Name == name })
	if i < 0 {
		return SourceFile{}, false
	}
	return s.Files[i], true
}

// Origin says where the split's copy of name (one of CopiedFiles) came from, for messages that should point at
// the file the user can fix: the path of the file in the checkpoint folder it was copied from, or (generated
// true) the single-file model (GGUF) whose metadata made it. path is "" when the record does not say (no record,
// or the checkpoint had no such file).
func (s *Source) Origin(name string) (path string, generated bool) {
	if s == nil || s.Checkpoint == "" {
		return "", false
	}
	if f, ok := s.file(name); ok {
		if f.Absent {
			return "", false
		}
		return filepath.Join(s.Checkpoint, name), false
	}
	// A single-file model's split records that file alone, or a split GGUF model's its parts, the first first
	// (sourceNames): the weight files only.
	if len(s.Files) > 0 && !slices.ContainsFunc(s.Files, func(f SourceFile) bool { return !f.Weights || slices.Contains(CopiedFiles, f.Name) }) {
		return filepath.Join(s.Checkpoint, s.Files[0].Name), true
	}
	return "", false
}

// sameIdentity reports whether a and b describe the same, unchanged file (or both an absent one).
func (a SourceFile) sameIdentity(b SourceFile) bool {
	if a.Absent || b.Absent {
		return a.Absent == b.Absent && a.Name == b.Name
	}
	return a.Name == b.Name && a.Weights == b.Weights && a.Size == b.Size && a.MTime == b.MTime && a.CTime == b.CTime &&
		a.Dev == b.Dev && a.Inode == b.Inode
}

// sourceNames lists the files of ck a split depends on: the copied config and tokenizer files, the index of a
// sharded checkpoint, and the weight files; weights reports which are weight files. A single-file model (GGUF:
// its config and tokenizer files are made from its metadata) depends on its one file, or on its parts, the first
// (holding the metadata) first.
func sourceNames(ck *checkpoint.Checkpoint) (names []string, weights map[string]bool) {
	if ck.Files == nil {
		names = append(slices.Clone(CopiedFiles), checkpoint.IndexFile)
	}
	weights = map[string]bool{}
	if ck.OpenFile != nil {
		return names, weights // generated tensors: no files
	}
	if ck.Files != nil { // the model's file, or the first part of a split one: its metadata, perhaps no tensors
		n := filepath.Base(ck.Dir)
		weights[n] = true
		names = append(names, n)
	}
	for _, t := range ck.Tensors {
		n := filepath.Base(t.File)
		if !weights[n] {
			weights[n] = true
			names = append(names, n)
		}
	}
	return names, weights
}

// statSourceFile describes name in dir by its identity, without hashing it.
func statSourceFile(dir, name string, weights bool) (SourceFile, error) {
	f := SourceFile{Name: name, Weights: weights}
	st, err := os.Stat(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) && !weights {
		f.Absent = true
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("shards: checkpoint file: %w", err)
	}
	f.Size, f.MTime, f.CTime = st.Size(), st.ModTime().UnixNano(), changeTime(st)
	f.Dev, f.Inode = fileID(st)
	return f, nil
}

// sourceDir is the folder holding ck's files: Dir, or for a single-file model the file's folder.
func sourceDir(ck *checkpoint.Checkpoint) string {
	if ck.Files != nil {
		return filepath.Dir(ck.Dir)
	}
	return ck.Dir
}

// headerEnd returns where the tensor data of the file name of a single-file model (GGUF, or one part of a GGUF
// model split over several files) begins, its first tensor's offset: its header, hashed as a safetensors file's
// is, holds the metadata the generated files come from. 0 for a safetensors checkpoint.
func headerEnd(ck *checkpoint.Checkpoint, name string) int64 {
	if ck.Files == nil {
		return 0
	}
	end := int64(math.MaxInt64) // a part with no tensors (gguf-split --no-tensor-first-split) is hashed whole
	for _, t := range ck.Tensors {
		if filepath.Base(t.File) == name {
			end = min(end, t.Offset)
		}
	}
	return end
}

// hashSourceFile fills f.SHA256: of the whole file, or of a weight file's header: a safetensors file's 8-byte
// length and JSON, or with headerEnd > 0 (a GGUF file) its first headerEnd bytes.
func hashSourceFile(dir string, f *SourceFile, headerEnd int64) error {
	if f.Absent {
		return nil
	}
	path := filepath.Join(dir, f.Name)
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("shards: hashing %s: %w", path, err)
	}
	defer in.Close()
	h := sha256.New()
	var r io.Reader = in
	switch {
	case f.Weights && headerEnd > 0:
		r = io.LimitReader(in, headerEnd)
	case f.Weights:
		var n [8]byte
		if _, err := io.ReadFull(in, n[:]); err != nil {
			return fmt.Errorf("shards: hashing %s: %w", path, err)
		}
		size := binary.LittleEndian.Uint64(n[:])
		if size > checkpoint.MaxHeaderSize {
			return fmt.Errorf("shards: hashing %s: safetensors header length %d", path, size)
		}
		h.Write(n[:])
		r = io.LimitReader(in, int64(size))
	}
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("shards: hashing %s: %w", path, err)
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// sourceState is a checkpoint's files now, compared with a previous Source.
type sourceState struct {
	src *Source
	// moved are the weight files whose identity differs from the record (all of them without a record): the
	// tensors stored in them must be hashed again to know whether they changed.
	moved map[string]bool
	// changed names the files whose content differs from the record (hash, or present/absent), for the log.
	changed []string
	// generated: the tensors are generated as they are read (checkpoint.OpenFile), with no files whose identity
	// would say they are unchanged: they are hashed again (synth --quantize over an earlier run of another seed
	// kept that run's shards).
	generated bool
}

// readSourceState stats every file ck's split depends on and hashes those whose identity differs from prev
// (which may be nil). A file's hash is taken after its stat, so a file changing meanwhile is caught next time.
func readSourceState(ck *checkpoint.Checkpoint, prev *Source, quantizer string) (*sourceState, error) {
	abs, err := filepath.Abs(sourceDir(ck))
	if err != nil {
		abs = ck.Dir
	}
	st := &sourceState{src: &Source{Checkpoint: abs, Units: map[string]string{}, Quantizer: quantizer}, moved: map[string]bool{}, generated: ck.OpenFile != nil}
	names, weights := sourceNames(ck)
	dir := sourceDir(ck)
	for _, name := range names {
		f, err := statSourceFile(dir, name, weights[name])
		if err != nil {
			return nil, err
		}
		old, had := prev.file(name)
		if had && old.sameIdentity(f) {
			f.SHA256 = old.SHA256
		} else {
			if err := hashSourceFile(dir, &f, headerEnd(ck, name)); err != nil {
				return nil, err
			}
			if f.Weights {
				st.moved[name] = true
			}
			if prev != nil && (!had || old.Absent != f.Absent || old.SHA256 != f.SHA256) {
				st.changed = append(st.changed, name)
			}
		}
		st.src.Files = append(st.src.Files, f)
	}
	if prev != nil {
		for _, f := range prev.Files {
			if !slices.Contains(names, f.Name) && !f.Absent {
				st.changed = append(st.changed, f.Name) // a weight file the checkpoint no longer has
			}
		}
	}
	return st, nil
}

// unitKnown reports whether plan p's source tensors are known unchanged since prev was recorded: prev hashed
// the unit and none of the files holding its tensors changed identity (never for generated tensors). It returns the recorded hash.
func (st *sourceState) unitKnown(p unitPlan, prev *Source) (string, bool) {
	if prev == nil || prev.Units[p.name] == "" || st.generated {
		return "", false
	}
	for _, t := range p.tensors {
		if st.moved[filepath.Base(t.File)] {
			return "", false
		}
	}
	return prev.Units[p.name], true
}

// upToDate reports whether the split recorded by src still matches ck without hashing anything: every file
// has the recorded identity and every unit a recorded hash. The reason comes back when it does not.
func upToDate(src *Source, ck *checkpoint.Checkpoint, units []UnitInfo) (bool, string) {
	if src == nil {
		return false, "the split has no source record (made by an older layerstream)"
	}
	names, weights := sourceNames(ck)
	for _, name := range names {
		f, err := statSourceFile(sourceDir(ck), name, weights[name])
		if err != nil {
			return false, err.Error()
		}
		old, ok := src.file(name)
		if !ok || !old.sameIdentity(f) {
			return false, name + " changed"
		}
	}
	for _, f := range src.Files {
		if !f.Absent && !slices.Contains(names, f.Name) {
			return false, f.Name + " is gone"
		}
	}
	for _, u := range units {
		if src.Units[u.Name] == "" {
			return false, "unit " + u.Name + " has no recorded hash"
		}
	}
	return true, ""
}

// SourceChanged compares the split's source record with the checkpoint folder it names and returns which of
// its files changed identity since the split ("" when none did, or when the record or the folder is missing: a
// checkpoint deleted after splitting is normal). It hashes nothing: a file merely touched counts as changed.
func (s *Set) SourceChanged() string {
	src := s.source
	if src == nil || src.Checkpoint == "" {
		return ""
	}
	if st, err := os.Stat(src.Checkpoint); err != nil || !st.IsDir() {
		return ""
	}
	var changed []string
	for _, f := range src.Files {
		now, err := statSourceFile(src.Checkpoint, f.Name, f.Weights)
		if err != nil || !now.sameIdentity(f) {
			changed = append(changed, f.Name)
		}
	}
	return strings.Join(changed, ",")
}

// tensorHasher computes the hash a split records for a unit's source tensors: XXH3-128 over, for each tensor,
// its name, dtype, shape and length, then its bytes. XXH3 is not a cryptographic hash, but its 128 bits make an
// accidental match of changed tensors as unlikely as SHA-256's would, and it runs at memory speed: SHA-256 (at
// 1.6 GB/s per core here) made a split of a 0.8 GB checkpoint 1.5-1.6 times slower, XXH3 (tens of GB/s) costs
// nothing measurable.
type tensorHasher struct{ h *xxh3.Hasher }

func newTensorHasher() *tensorHasher { return &tensorHasher{h: xxh3.New()} }

func (th *tensorHasher) reset() { th.h.Reset() }

// begin starts tensor t; its bytes follow through Write.
func (th *tensorHasher) begin(t checkpoint.TensorInfo) {
	var b []byte
	b = append(b, t.Name...)
	b = append(b, 0)
	b = append(b, t.DType...)
	for _, d := range t.Shape {
		b = append(b, ',')
		b = strconv.AppendInt(b, d, 10)
	}
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Length))
	th.h.Write(b)
}

func (th *tensorHasher) Write(p []byte) (int, error) { return th.h.Write(p) }

// sum returns the unit's hash, in hex.
func (th *tensorHasher) sum() string {
	b := th.h.Sum128().Bytes()
	return hex.EncodeToString(b[:])
}
