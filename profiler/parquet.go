package profiler

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/layerstream/layerstream/internal/atomicfile"
)

// TraceRow is one row of the Parquet trace written by WriteParquet: one event. The schema (column: type):
//
//	step:     int32  token step, 0 = prefill, 1.. = decode steps
//	layer:    int32  decoder layer, -1 for embed/norm/lm_head/sampling/tokenizing
//	category: string (dictionary-encoded) disk_read, decode, h2d, forward, prefetch_wait, sample, tokenize
//	start_ns: int64  start in nanoseconds relative to the run start (negative if recorded before it)
//	dur_ns:   int64  duration in nanoseconds
//	bytes:    int64  bytes moved or processed, 0 when not applicable
//
// Rows are in start order. The file is plain Parquet (zstd-compressed columns, no page statistics) readable by
// DuckDB (`SELECT category, sum(dur_ns)/1e9 FROM 'trace.parquet' GROUP BY 1`), pandas and polars.
type TraceRow struct {
	Step     int32  `parquet:"step"`
	Layer    int32  `parquet:"layer"`
	Category string `parquet:"category,dict"`
	StartNS  int64  `parquet:"start_ns"`
	DurNS    int64  `parquet:"dur_ns"`
	Bytes    int64  `parquet:"bytes"`
}

// rowsPerGroup bounds how many rows the Parquet writer buffers before flushing a row group.
const rowsPerGroup = 1 << 16

// WriteParquet writes the recorded events to path as a Parquet file with one row per event (schema: TraceRow).
// The file is written atomically (temporary file, then rename).
func (p *Profiler) WriteParquet(path string) error {
	if p == nil {
		return nil
	}
	return WriteEventsParquet(path, p.Events())
}

// WriteEventsParquet writes events to path in the WriteParquet format.
func WriteEventsParquet(path string, events []Event) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[TraceRow](w,
			parquet.Compression(&parquet.Zstd),
			parquet.DataPageStatistics(false),
			parquet.SkipPageBounds("category"),
		)
		rows := make([]TraceRow, 0, min(len(events), rowsPerGroup))
		for i := 0; i < len(events); i += rowsPerGroup {
			rows = rows[:0]
			for _, e := range events[i:min(i+rowsPerGroup, len(events))] {
				rows = append(rows, TraceRow{Step: int32(e.Step), Layer: int32(e.Layer), Category: string(e.Category),
					StartNS: int64(e.Start), DurNS: int64(e.Dur), Bytes: e.Bytes})
			}
			if _, err := pw.Write(rows); err != nil {
				return err
			}
			if err := pw.Flush(); err != nil {
				return err
			}
		}
		return pw.Close()
	})
}

// ReadParquet reads a trace written by WriteParquet back into events.
func ReadParquet(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profile trace: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("profile trace %s: %w", path, err)
	}
	rows, err := parquet.Read[TraceRow](f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("profile trace %s: %w", path, err)
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		events[i] = Event{Step: int(r.Step), Layer: int(r.Layer), Category: Category(r.Category),
			Start: time.Duration(r.StartNS), Dur: time.Duration(r.DurNS), Bytes: r.Bytes}
	}
	return events, nil
}
