package gguf

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// A model split over several GGUF files (llama.cpp's gguf-split; Hugging Face repos split files over 50 GB)
// names them PREFIX-00001-of-00003.gguf ... and records in each its part number (split.no, from 0), the part
// count (split.count) and, in the first, the total tensor count (split.tensors.count). The first part holds the
// metadata; every part holds some of the tensors, with offsets into its own data section.

// splitName matches a part's file name: the prefix, its number and the count, five digits each.
var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// maxParts bounds split.count: llama.cpp writes five digits.
const maxParts = 99999

// SplitParts parses name as a part of a model split over several files, PREFIX-00002-of-00003.gguf (a path keeps
// its folder in the names): it returns the names of every part, in order, and the part number name says (from 1;
// it may lie outside 1..len(parts)). ok is false when name does not follow the pattern or counts fewer than two
// parts.
func SplitParts(name string) (parts []string, no int, ok bool) {
	m := splitName.FindStringSubmatch(name)
	if m == nil {
		return nil, 0, false
	}
	count, _ := strconv.Atoi(m[3]) // five digits each
	no, _ = strconv.Atoi(m[2])
	if count < 2 {
		return nil, 0, false
	}
	parts = make([]string, count)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i+1, count)
	}
	return parts, no, true
}

// OpenModel parses the GGUF model at path: one file, or the first part of a model split over several files,
// whose other parts (found beside it by their names) it parses too. The result holds the first part's metadata
// and every part's tensors, each TensorInfo.Path naming its file; Parts lists the files. A part that is missing,
// numbered or counted inconsistently, holding metadata that contradicts the first part's, or repeating a tensor
// is refused by name, and so is a path naming another part than the first.
func OpenModel(path string) (*File, error) {
	g, err := Open(path)
	if err != nil {
		return nil, err
	}
	g.Parts = []string{path}
	count, ok, err := g.Uint("split.count")
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	if !ok || count <= 1 {
		return g, nil
	}
	if count > maxParts {
		return nil, fmt.Errorf("gguf %s: split.count is %d (at most %d parts)", path, count, maxParts)
	}
	no, _, err := g.Uint("split.no")
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	names, n, ok := SplitParts(filepath.Base(path))
	if !ok {
		return nil, fmt.Errorf("gguf %s: part %d of %d of a split model, but its name is not PREFIX-%05d-of-%05d.gguf, so the other parts cannot be found", path, no+1, count, no+1, count)
	}
	if n != int(no)+1 || len(names) != int(count) {
		return nil, fmt.Errorf("gguf %s: the file name says part %05d of %05d, its metadata part %d of %d (split.no %d, split.count %d)", path, n, len(names), no+1, count, no, count)
	}
	if no != 0 {
		return nil, fmt.Errorf("gguf %s: part %d of %d of a split model: open the first part, %s", path, no+1, count, names[0])
	}
	for i := 1; i < int(count); i++ {
		pp := filepath.Join(filepath.Dir(path), names[i])
		part, err := Open(pp)
		if err != nil {
			return nil, fmt.Errorf("part %d of %d of %s: %w", i+1, count, path, err)
		}
		if err := g.addPart(part, i, int(count)); err != nil {
			return nil, fmt.Errorf("gguf %s: %w", pp, err)
		}
		g.Parts = append(g.Parts, pp)
	}
	if want, ok, err := g.Uint("split.tensors.count"); err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	} else if ok && want != uint64(len(g.Tensors)) {
		return nil, fmt.Errorf("gguf %s: split.tensors.count is %d, the %d parts hold %d tensors", path, want, count, len(g.Tensors))
	}
	return g, nil
}

// addPart adds part i (from 0) of count to g: its tensors, after checking its numbering and that its metadata
// (other than split.*) repeats g's.
func (g *File) addPart(part *File, i, count int) error {
	if no, _, err := part.Uint("split.no"); err != nil || no != uint64(i) {
		return fmt.Errorf("split.no is %d (%v), want %d", no, err, i)
	}
	if n, _, err := part.Uint("split.count"); err != nil || n != uint64(count) {
		return fmt.Errorf("split.count is %d (%v), want %d", n, err, count)
	}
	// gguf-split writes the model's tensor count into every part: a part of another split of the same shape
	// (another quantization, another revision) says otherwise.
	want, wok, werr := g.Uint("split.tensors.count")
	got, gok, gerr := part.Uint("split.tensors.count")
	if werr != nil || gerr != nil || wok && gok && got != want {
		return fmt.Errorf("split.tensors.count is %d, the first part's %d: a part of another split model", got, want)
	}
	for _, kv := range part.KVs {
		if strings.HasPrefix(kv.Key, "split.") {
			continue
		}
		if v, ok := g.Get(kv.Key); !ok || !reflect.DeepEqual(v, kv.Value) {
			return fmt.Errorf("metadata %s differs from the first part's (or the first part has none)", kv.Key)
		}
	}
	for _, t := range part.Tensors {
		if _, dup := g.byName[t.Name]; dup {
			return fmt.Errorf("tensor %q is in an earlier part too", t.Name)
		}
		g.byName[t.Name] = len(g.Tensors)
		g.Tensors = append(g.Tensors, t)
	}
	return nil
}
