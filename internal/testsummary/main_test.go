package main

import (
	"strings"
	"testing"
)

// TestSummarize: counts, skip reasons and failure output from a recorded test2json stream; a failure makes it
// report failed, and a stream with only passes and skips does not.
func TestSummarize(t *testing.T) {
	const stream = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.01}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: skipping: shared test data not found\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestD","Output":"--- SKIP: TestD (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestD"}
{"Action":"pass","Package":"p","Elapsed":0.5}
`
	var out strings.Builder
	failed, err := summarize(strings.NewReader(stream), &out)
	if err != nil || failed {
		t.Fatalf("failed %v, err %v; want neither", failed, err)
	}
	for _, want := range []string{"ok  \tp\t0.500s", "skipped (2):", "p TestB: b_test.go:9: skipping: shared test data not found",
		"p TestD: (no reason given", "tests: 1 passed, 2 skipped, 0 failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}

	const failing = `{"Action":"output","Package":"q","Test":"TestC","Output":"    c_test.go:3: logits differ by 0.5\n"}
{"Action":"fail","Package":"q","Test":"TestC"}
{"Action":"fail","Package":"q","Elapsed":1}
{"ImportPath":"r","Action":"build-output","Output":"r/x.go:1:1: syntax error\n"}
{"ImportPath":"r","Action":"build-fail"}
`
	out.Reset()
	failed, err = summarize(strings.NewReader(failing), &out)
	if err != nil || !failed {
		t.Fatalf("failed %v, err %v; want failed", failed, err)
	}
	for _, want := range []string{"--- FAIL: TestC (q)", "logits differ by 0.5", "FAIL\tq", "r/x.go:1:1: syntax error", "failed (1):\n  q TestC\n",
		"tests: 0 passed, 0 skipped, 1 failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
