package imatrix_test

import (
	"fmt"

	"github.com/layerstream/layerstream/imatrix"
)

// A collector is handed the inputs of each matrix product (engine.Options.ObserveInputs takes its Observe); its
// matrix holds each column's mean square.
func ExampleCollector() {
	c := imatrix.NewCollector()
	// Two input rows of three columns multiplied with one weight matrix...
	c.Observe("model.layers.0.mlp.down_proj.weight", []float32{1, 2, 3, -1, 0, 3}, 3)
	m := c.Matrix()
	fmt.Println(m.Columns["model.layers.0.mlp.down_proj.weight"])
	// Output: [1 2 9]
}
