package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// covers runs parallelFor over [0, n) with workers and reports an error unless every index ran exactly once.
func covers(n, workers int) error {
	counts := make([]atomic.Int32, n)
	parallelFor(n, workers, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			counts[i].Add(1)
		}
	})
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			return fmt.Errorf("n=%d workers=%d: index %d ran %d times", n, workers, i, c)
		}
	}
	return nil
}

// TestParallelForPool checks parallelFor on the helper pool: every index once whatever n and the number of
// ranges, with callers running concurrently (one holds the pool, the others start goroutines) and nested.
func TestParallelForPool(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for _, w := range []int{0, 1, 2, 3, 8} {
			if err := covers(n, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := covers(1+(g*37+i)%97, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var inner atomic.Int64
	parallelFor(4, 0, func(lo, hi int) {
		for range hi - lo {
			parallelFor(100, 0, func(lo, hi int) { inner.Add(int64(hi - lo)) })
		}
	})
	if inner.Load() != 400 {
		t.Fatalf("nested parallelFor ran %d of 400 indices", inner.Load())
	}
}

// TestParallelForPanics checks that a panic in any range, the calling goroutine's or a helper's, is raised
// again by parallelFor once every range is done, and that the pool works afterwards.
func TestParallelForPanics(t *testing.T) {
	for _, at := range []int{0, 99} {
		func() {
			defer func() {
				if r := recover(); r != fmt.Sprint("boom ", at) {
					t.Errorf("panic at %d: recovered %v", at, r)
				}
			}()
			parallelFor(100, 0, func(lo, hi int) {
				if lo <= at && at < hi {
					panic(fmt.Sprint("boom ", at))
				}
			})
		}()
		if err := covers(100, 0); err != nil {
			t.Fatal(err)
		}
	}
}
