package grow_test

import (
	"fmt"

	"github.com/layerstream/layerstream/internal/grow"
)

// A buffer kept between calls is reallocated only when a call needs more than it has held.
func ExampleSlice() {
	var buf []byte
	for _, n := range []int{3, 8, 5} {
		buf = grow.Slice(buf, n)
		fmt.Println(len(buf), cap(buf))
	}
	// Output:
	// 3 3
	// 8 8
	// 5 8
}
