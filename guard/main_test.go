package guard

import (
	"os"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestMain points the layerstream cache (where checkpoints are split on first use) at a temporary folder.
func TestMain(m *testing.M) { os.Exit(testutil.RunWithCache(m)) }
