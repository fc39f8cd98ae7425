package shards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"
	"unsafe"
)

// testHookMapFile maps shard files; tests replace it to simulate a filesystem that refuses.
var testHookMapFile = mapFile

// Map is Load without the copy: it maps unit's shard file into memory (read-only, shared with the page cache)
// and returns its tensors aliasing the mapping, with the same checks as Load: the file's size and table
// against the manifest, and every tensor's CRC-32C unless the file was verified unchanged under VerifyOnce.
// Encoded tensors are decompressed into buf; raw ones are read where the page cache holds them.
//
// A shard in the page cache then costs no copy at all: the mapping's page tables are filled up front (on
// Linux, MAP_POPULATE, about 1 ms for a 88 MB layer against 15 ms for the copy of Load), and the reads that
// compute makes go straight to the cached pages. A shard not in the page cache is read from disk while it is
// mapped, by the kernel's readahead.
//
// buf holds the mapping until the next Load or Map into it, or buf.Release. Its tensors must not be used after
// that: the memory is unmapped and reading it faults. Under SetKeepMapped the set holds the mapping instead,
// until Close, and later Maps of the unchanged file reuse it. A shard file must not be truncated while it is
// mapped: reading a page past the new end raises SIGBUS. Map's own reads (the table, the checksums) return such
// a fault as a *MappingFault error; later readers of the tensors must ask for a panic instead of the crash Go
// makes of it (debug.SetPanicOnFault; MappedAt then tells a fault in a kept mapping from other ones, as the
// engine does). Split never truncates: it replaces files by renaming new ones over them, which
// leaves existing mappings intact.
//
// Under SetKeepMapped and VerifyOnce, a Map of an unchanged file verified earlier whose tensors are all raw
// returns the tensors checked then (the same map: read it, do not modify it), after a stat and a residency check.
//
// Where mapping is not available (a platform without mmap, a filesystem that refuses it) Map logs one warning
// and Loads instead, for good. With SetDirectIO on, Map is Load: O_DIRECT is for reading past the page cache.
func (s *Set) Map(ctx context.Context, unit string, buf *Buffer) (*Loaded, error) {
	if s.direct.Load() || s.noMap.Load() {
		return s.Load(ctx, unit, buf)
	}
	u, path, err := s.request(ctx, "Map", unit, buf)
	if err != nil {
		return nil, err
	}
	buf.release()
	start := time.Now()
	if l, err := s.reuseKept(u, path, start); l != nil || err != nil {
		return l, err
	}
	f := s.pinnedFile(u.Name)
	if f == nil {
		if f, err = os.Open(path); err != nil {
			return nil, openError(path, u, err)
		}
		defer f.Close() // the mapping outlives the descriptor
	}
	st, err := statShard(f, path, u)
	if err != nil {
		return nil, err
	}
	verify := VerifyPolicy(s.policy.Load()) != VerifyOnce || !s.verifiedAs(u.Name, st)
	keep := s.keepMapped.Load()
	var m []byte
	if keep {
		if m, _ = s.keptMapping(u.Name, st); m != nil {
			// pages evicted since its last use are read back here, not in compute's page faults
			if err := guardFault(path, func() error { faultIn(m); return nil }); err != nil {
				return nil, err
			}
		}
	}
	if m == nil {
		if m, err = testHookMapFile(f, u.FileSize); err != nil {
			if !errors.Is(err, errNoMap) {
				err = fmt.Errorf("%w: %w", errNoMap, err)
			}
			s.mapWarnOnce.Do(func() {
				slog.Warn("shards: cannot map shard files; reading them into buffers instead", "dir", s.Dir, "err", err)
			})
			s.noMap.Store(true)
			return s.Load(ctx, unit, buf)
		}
		if keep {
			s.keepMapping(u.Name, m, st)
		} else {
			buf.mapped = m
		}
	}
	buf.ensure(u.DecodeSize)
	reads := fileReads{read: func([]byte, int64) error { return nil }, chunk: len(m)} // mapped: the bytes are there
	var l *Loaded
	err = guardFault(path, func() (err error) {
		l, err = s.check(ctx, u, path, st, start, m, buf.b[:u.DecodeSize], verify, reads) // nothing is read up front: no ReadDone
		return err
	})
	if err != nil {
		buf.release()
		return nil, err
	}
	if keep && u.DecodeSize == 0 {
		s.keepTensors(u.Name, st, l.Tensors)
	}
	return l, nil
}

// reuseKept is Map of a unit whose kept mapping (SetKeepMapped) still maps the same, unchanged file, verified
// under VerifyOnce, with only raw tensors: its tensors, checked when the file was mapped, are returned again
// without reading the file's table anew (a stat and a residency check instead of an open, a stat and a JSON
// table parsed and compared: 0.2 ms per layer, a sixth of a SmolLM2-135M decode step). Anything else (no kept
// tensors, a changed file, a policy that verifies) returns nil and Map takes its full path.
func (s *Set) reuseKept(u UnitInfo, path string, start time.Time) (*Loaded, error) {
	if !s.keepMapped.Load() || VerifyPolicy(s.policy.Load()) != VerifyOnce {
		return nil, nil
	}
	var st os.FileInfo
	var err error
	if f := s.pinnedFile(u.Name); f != nil {
		st, err = f.Stat()
	} else {
		st, err = os.Stat(path)
	}
	if err != nil || !s.verifiedAs(u.Name, st) {
		return nil, nil
	}
	m, tensors := s.keptMapping(u.Name, st)
	if m == nil || tensors == nil {
		return nil, nil
	}
	// pages evicted since its last use are read back here, not in compute's page faults
	if err := guardFault(path, func() error { faultIn(m); return nil }); err != nil {
		return nil, err
	}
	return &Loaded{Unit: u, Tensors: tensors, ReadTime: time.Since(start)}, nil
}

// keptMap is a mapping kept by the set (SetKeepMapped) and the file it maps; tensors, when set, are the tensors
// a check of that file returned (all raw: they alias the mapping), handed out again by reuseKept.
type keptMap struct {
	data    []byte
	stat    os.FileInfo
	tensors map[string]Tensor
}

// retiredMap is a kept mapping of a file since replaced.
type retiredMap struct {
	unit string
	data []byte
}

// SetKeepMapped makes Map keep each shard file mapped after use, until Close, instead of mapping it anew on
// every Map and unmapping it when the Buffer is reused. A later Map of the same, unchanged file (same identity,
// as VerifyOnce compares it) reuses the mapping: a streamed layer in the page cache then costs an open and a
// stat. A file replaced since gets a new mapping; the old one stays until Close, as tensors from it may still
// be in use.
//
// The memory is the page cache's either way: a kept mapping holds no memory of its own, and the kernel still
// evicts its pages under memory pressure (they are clean file pages) and reads them back when touched. What
// changes is the bookkeeping: the process's resident set counts the shard pages it has touched (as shared file
// memory), and unmapping 88 MB of 4 KiB pages and mapping them again (about 2 ms of kernel time per
// TinyLlama layer on the 2-core VM, 13% of a page-cache-warm decode step) is saved. A reused mapping whose
// pages the kernel evicted meanwhile has them read back by Map, as a new mapping would.
func (s *Set) SetKeepMapped(on bool) { s.keepMapped.Store(on) }

// keptMapping returns the kept mapping of unit's file, and its checked tensors when kept, if st shows the same,
// unchanged file; else nil.
func (s *Set) keptMapping(unit string, st os.FileInfo) ([]byte, map[string]Tensor) {
	s.mapsMu.Lock()
	defer s.mapsMu.Unlock()
	if k, ok := s.kept[unit]; ok && sameFile(k.stat, st) {
		return k.data, k.tensors
	}
	return nil, nil
}

// keepTensors records the checked tensors of unit's kept mapping of the file st describes.
func (s *Set) keepTensors(unit string, st os.FileInfo, tensors map[string]Tensor) {
	s.mapsMu.Lock()
	defer s.mapsMu.Unlock()
	if k, ok := s.kept[unit]; ok && sameFile(k.stat, st) {
		k.tensors = tensors
		s.kept[unit] = k
	}
}

// keepMapping records m as unit's mapping, retiring the one it replaces.
func (s *Set) keepMapping(unit string, m []byte, st os.FileInfo) {
	s.mapsMu.Lock()
	defer s.mapsMu.Unlock()
	if s.kept == nil {
		s.kept = map[string]keptMap{}
	}
	if old, ok := s.kept[unit]; ok {
		s.retired = append(s.retired, retiredMap{unit: unit, data: old.data})
	}
	s.kept[unit] = keptMap{data: m, stat: st}
}

// MappedAt reports whether addr lies inside a mapping the set keeps (SetKeepMapped), and of which unit's file.
func (s *Set) MappedAt(addr uintptr) (unit string, ok bool) {
	s.mapsMu.Lock()
	defer s.mapsMu.Unlock()
	inside := func(m []byte) bool {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		return addr >= lo && addr < lo+uintptr(len(m))
	}
	for name, k := range s.kept {
		if inside(k.data) {
			return name, true
		}
	}
	for _, r := range s.retired {
		if inside(r.data) {
			return r.unit + " (an earlier version of its file)", true
		}
	}
	return "", false
}

// Close unmaps the mappings kept under SetKeepMapped, tensors from them must not be used afterwards, and closes
// the files Pin opened. The set stays usable (a later Map maps again, from the files by name). Buffers' own
// mappings are theirs to Release.
func (s *Set) Close() error {
	s.pinMu.Lock()
	pinErr := s.closePinned()
	s.pinMu.Unlock()
	s.mapsMu.Lock()
	defer s.mapsMu.Unlock()
	errs := []error{pinErr}
	for _, k := range s.kept {
		errs = append(errs, unmapFile(k.data))
	}
	for _, r := range s.retired {
		errs = append(errs, unmapFile(r.data))
	}
	s.kept, s.retired = nil, nil
	return errors.Join(errs...)
}

// MappingFault is the error of a fault reading a mapped shard file: the file was truncated, or its storage went
// away, while it was mapped.
type MappingFault struct {
	Path string
	Addr uintptr
}

func (f *MappingFault) Error() string {
	return fmt.Sprintf("shard %s: reading its mapping faulted at %#x: the file was truncated or its storage went away while mapped; run layerstream split again", f.Path, f.Addr)
}

// guardFault runs fn, which reads a mapping of the shard file at path, with memory faults turned into panics
// (debug.SetPanicOnFault), and returns a fault as a *MappingFault. Other panics go on up. Goroutines fn starts
// need their own guard (check.runGuarded).
func guardFault(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f := asFault(path, r); f != nil {
				err = f
				return
			}
			panic(r)
		}
	}()
	return fn()
}

// asFault returns the recovered value r as a *MappingFault when it is a memory fault (a runtime error carrying
// the faulting address, which debug.SetPanicOnFault makes of SIGBUS and SIGSEGV), else nil.
func asFault(path string, r any) *MappingFault {
	if re, ok := r.(runtime.Error); ok {
		if a, ok := re.(interface{ Addr() uintptr }); ok {
			return &MappingFault{Path: path, Addr: a.Addr()}
		}
	}
	return nil
}
