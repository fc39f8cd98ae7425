package shards

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/atomicfile"
)

// ManifestFile is the name of the manifest in a shard folder. It is written last, so a folder without it holds
// an incomplete split.
const ManifestFile = "manifest.parquet"

// manifestRow is one tensor in manifest.parquet.
type manifestRow struct {
	Tensor string `parquet:"tensor"`
	Unit   string `parquet:"unit"`
	// Layer is the layer index of a layer.N unit, -1 for the others.
	Layer int32   `parquet:"layer"`
	DType string  `parquet:"dtype"`
	Shape []int64 `parquet:"shape,list"`
	File  string  `parquet:"file"`
	// Offset is the absolute offset of the stored bytes in File, Length the decoded byte count.
	Offset        int64  `parquet:"offset"`
	Length        int64  `parquet:"length"`
	Checksum      int64  `parquet:"checksum"` // CRC-32C of the decoded bytes
	Encoding      string `parquet:"encoding"`
	EncodedLength int64  `parquet:"encoded_length"`
	// Frames are the stored lengths of an encoded tensor's frames (empty when raw).
	Frames   []int64 `parquet:"frames,list"`
	FileSize int64   `parquet:"file_size"` // size of File in bytes
	// Expert is the routed expert the tensor belongs to (TensorInfo.Expert); null for none, and in manifests
	// written before splits laid experts out apart.
	Expert *int32 `parquet:"expert,optional"`
}

// maxExperts bounds a manifest's expert index (the largest models route among a few hundred experts).
const maxExperts = 1 << 16

// unitLayer returns N for "layer.N" and -1 for the other unit names; ok is false for a name that is no unit.
func unitLayer(unit string) (layer int, ok bool) {
	switch unit {
	case "embed", "norm", "lm_head":
		return -1, true
	}
	s, found := strings.CutPrefix(unit, "layer.")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func manifestRows(units []UnitInfo) []manifestRow {
	var rows []manifestRow
	for _, u := range units {
		for _, t := range u.Tensors {
			rows = append(rows, manifestRow{
				Tensor: t.Name, Unit: u.Name, Layer: int32(u.Layer), DType: string(t.DType), Shape: t.Shape,
				File: u.File, Offset: t.Offset, Length: t.Length, Checksum: int64(t.CRC32C),
				Encoding: string(t.Encoding), EncodedLength: t.EncodedLength, Frames: t.Frames, FileSize: u.FileSize,
			})
			if e := t.Expert(); e != NoExpert {
				e32 := int32(e)
				rows[len(rows)-1].Expert = &e32
			}
		}
	}
	return rows
}

// writeManifest writes manifest.parquet atomically, with src (when not nil) in its key-value metadata.
func writeManifest(dir string, units []UnitInfo, src *Source) error {
	var opts []parquet.WriterOption
	if src != nil {
		js, err := json.Marshal(src)
		if err != nil {
			return err
		}
		opts = append(opts, parquet.KeyValueMetadata(sourceKey, string(js)))
	}
	return atomicfile.Write(filepath.Join(dir, ManifestFile), func(w io.Writer) error {
		return parquet.Write(w, manifestRows(units), opts...)
	})
}

// maxManifestRows bounds the tensors a manifest may list, so that a damaged row count cannot ask for an
// absurd allocation (the largest checkpoints have a few thousand tensors).
const maxManifestRows = 1 << 22

// readManifest reads manifest.parquet and rebuilds the units, validating every row, and the source record
// (nil in a manifest written before splits recorded their source).
func readManifest(dir string) ([]UnitInfo, *Source, error) {
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	units, src, err := parseManifest(f, st.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return units, src, nil
}

// parseManifest reads a manifest of size bytes from r.
func parseManifest(r io.ReaderAt, size int64) (units []UnitInfo, src *Source, err error) {
	defer func() {
		if p := recover(); p != nil { // the Parquet reader is not hardened against every damaged file
			units, src, err = nil, nil, fmt.Errorf("damaged Parquet file: %v", p)
		}
	}()
	if err := checkParquetFrame(r, size); err != nil {
		return nil, nil, err
	}
	file, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, nil, err
	}
	if n := file.NumRows(); n <= 0 || n > maxManifestRows {
		return nil, nil, fmt.Errorf("%d tensors (want 1 to %d)", n, maxManifestRows)
	}
	rows := make([]manifestRow, file.NumRows())
	reader := parquet.NewGenericReader[manifestRow](file)
	n, err := reader.Read(rows)
	reader.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if n != len(rows) {
		return nil, nil, fmt.Errorf("read %d of %d tensors", n, len(rows))
	}
	if js, ok := file.Lookup(sourceKey); ok {
		if src, err = parseSource(js); err != nil {
			return nil, nil, err
		}
	}
	units, err = unitsOf(rows)
	return units, src, err
}

// maxManifestSize bounds a manifest file: a thousand-layer model's manifest is well under a megabyte.
const maxManifestSize = 64 << 20

// checkParquetFrame checks the magic numbers and the footer length of a Parquet file before the Parquet reader
// sees it: that reader allocates the footer's declared length before reading it (4 GB for a damaged length).
func checkParquetFrame(r io.ReaderAt, size int64) error {
	if size < 12 || size > maxManifestSize {
		return fmt.Errorf("%d bytes: not a manifest (want 12 bytes to %d MB)", size, maxManifestSize>>20)
	}
	var head, tail [4]byte
	var footer [8]byte
	if _, err := r.ReadAt(head[:], 0); err != nil {
		return err
	}
	if _, err := r.ReadAt(footer[:], size-8); err != nil {
		return err
	}
	copy(tail[:], footer[4:])
	if string(head[:]) != "PAR1" || string(tail[:]) != "PAR1" {
		return errors.New("not a Parquet file (no PAR1 magic)")
	}
	if n := int64(binary.LittleEndian.Uint32(footer[:4])); n > size-12 {
		return fmt.Errorf("Parquet footer length %d does not fit the %d-byte file", n, size)
	}
	return nil
}

// unitsOf rebuilds the units from the manifest's rows, validating each.
func unitsOf(rows []manifestRow) ([]UnitInfo, error) {
	var units []UnitInfo
	index := map[string]int{}
	for i, r := range rows {
		layer, ok := unitLayer(r.Unit)
		if !ok || int32(layer) != r.Layer {
			return nil, fmt.Errorf("row %d (tensor %q): bad unit %q / layer %d", i, r.Tensor, r.Unit, r.Layer)
		}
		if r.File != filepath.Base(r.File) || r.File == "" || r.File == "." || r.File == ".." {
			return nil, fmt.Errorf("row %d (tensor %q): shard file %q must be a plain file name", i, r.Tensor, r.File)
		}
		ui, seen := index[r.Unit]
		if !seen {
			ui = len(units)
			index[r.Unit] = ui
			units = append(units, UnitInfo{Name: r.Unit, Layer: layer, File: r.File, FileSize: r.FileSize})
		} else if ui != len(units)-1 {
			return nil, fmt.Errorf("row %d: unit %q's tensors are not contiguous", i, r.Unit)
		}
		u := &units[ui]
		if u.File != r.File || u.FileSize != r.FileSize {
			return nil, fmt.Errorf("row %d (tensor %q): unit %q has two files or sizes", i, r.Tensor, r.Unit)
		}
		if r.Checksum < 0 || r.Checksum > 0xffffffff {
			return nil, fmt.Errorf("row %d (tensor %q): checksum %d is not a CRC-32C", i, r.Tensor, r.Checksum)
		}
		t := TensorInfo{Name: r.Tensor, DType: checkpoint.DType(r.DType), Shape: r.Shape, Offset: r.Offset,
			Length: r.Length, Encoding: Encoding(r.Encoding), EncodedLength: r.EncodedLength, CRC32C: uint32(r.Checksum)}
		if len(r.Frames) > 0 {
			t.Frames = r.Frames
		}
		if r.Expert != nil {
			if *r.Expert < 0 || *r.Expert >= maxExperts || r.Layer < 0 {
				return nil, fmt.Errorf("row %d (tensor %q): expert %d (want 0 to %d, in a layer unit)", i, r.Tensor, *r.Expert, maxExperts-1)
			}
			t = t.WithExpert(int(*r.Expert))
		}
		if err := validateTensor(&t, r.FileSize); err != nil {
			return nil, fmt.Errorf("row %d (tensor %q): %w", i, r.Tensor, err)
		}
		u.Tensors = append(u.Tensors, t)
	}
	for i := range units {
		units[i].DecodeSize = decodeSize(units[i].Tensors)
		if err := checkExpertLayout(units[i]); err != nil {
			return nil, err
		}
	}
	return units, nil
}

// checkExpertLayout checks that unit u lays out its tensors as a split does: those of no expert first, then each
// expert's together, in increasing order of expert (so that one expert is one read).
func checkExpertLayout(u UnitInfo) error {
	last := NoExpert
	for _, t := range u.Tensors {
		e := t.Expert()
		if e < last {
			return fmt.Errorf("unit %s: tensor %q of expert %d comes after expert %d's tensors (each expert's tensors must lie together, after the layer's other tensors)", u.Name, t.Name, e, last)
		}
		last = e
	}
	return nil
}
