package shards

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/layerstream/layerstream/checkpoint"
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
	// Frames are the stored lengths of an encoded tensor's zstd frames (empty when raw).
	Frames   []int64 `parquet:"frames,list"`
	FileSize int64   `parquet:"file_size"` // size of File in bytes
}

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
		}
	}
	return rows
}

// writeManifest writes manifest.parquet atomically.
func writeManifest(dir string, units []UnitInfo) error {
	return writeFileAtomic(filepath.Join(dir, ManifestFile), func(w io.Writer) error {
		return parquet.Write(w, manifestRows(units))
	})
}

// readManifest reads manifest.parquet and rebuilds the units, validating every row.
func readManifest(dir string) ([]UnitInfo, error) {
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	rows, err := parquet.Read[manifestRow](f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no tensors", path)
	}
	var units []UnitInfo
	index := map[string]int{}
	for i, r := range rows {
		layer, ok := unitLayer(r.Unit)
		if !ok || int32(layer) != r.Layer {
			return nil, fmt.Errorf("%s: row %d (tensor %q): bad unit %q / layer %d", path, i, r.Tensor, r.Unit, r.Layer)
		}
		if r.File != filepath.Base(r.File) || r.File == "" || r.File == "." || r.File == ".." {
			return nil, fmt.Errorf("%s: row %d (tensor %q): shard file %q must be a plain file name", path, i, r.Tensor, r.File)
		}
		ui, seen := index[r.Unit]
		if !seen {
			ui = len(units)
			index[r.Unit] = ui
			units = append(units, UnitInfo{Name: r.Unit, Layer: layer, File: r.File, FileSize: r.FileSize})
		} else if ui != len(units)-1 {
			return nil, fmt.Errorf("%s: row %d: unit %q's tensors are not contiguous", path, i, r.Unit)
		}
		u := &units[ui]
		if u.File != r.File || u.FileSize != r.FileSize {
			return nil, fmt.Errorf("%s: row %d (tensor %q): unit %q has two files or sizes", path, i, r.Tensor, r.Unit)
		}
		if r.Checksum < 0 || r.Checksum > 0xffffffff {
			return nil, fmt.Errorf("%s: row %d (tensor %q): checksum %d is not a CRC-32C", path, i, r.Tensor, r.Checksum)
		}
		t := TensorInfo{Name: r.Tensor, DType: checkpoint.DType(r.DType), Shape: r.Shape, Offset: r.Offset,
			Length: r.Length, Encoding: Encoding(r.Encoding), EncodedLength: r.EncodedLength, CRC32C: uint32(r.Checksum)}
		if len(r.Frames) > 0 {
			t.Frames = r.Frames
		}
		if err := validateTensor(&t, r.FileSize); err != nil {
			return nil, fmt.Errorf("%s: row %d (tensor %q): %w", path, i, r.Tensor, err)
		}
		u.Tensors = append(u.Tensors, t)
	}
	for i := range units {
		units[i].DecodeSize = decodeSize(units[i].Tensors)
	}
	return units, nil
}
