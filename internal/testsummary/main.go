// Command testsummary reads `go test -json` output on stdin and prints what a person needs from a whole-suite
// run: one line per package, the output of every failed test, then at the end every skipped test with its reason,
// the names of the failed tests, and the counts of passed, skipped and failed tests (subtests included). It exits 1 when anything failed, a package
// that did not build included.
//
//	go test -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of test2json output (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// summarize writes the summary of the test2json stream in to w and reports whether anything failed.
func summarize(in io.Reader, w io.Writer) (failed bool, err error) {
	output := map[key]*strings.Builder{}
	var passed, skipped, failedTests []key
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			fmt.Fprintf(w, "%s\n", line) // not an event: go test's own messages (a build failure, say)
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "build-output": // go test -json reports compile errors as events (Go 1.24 on)
			fmt.Fprint(w, ev.Output)
		case "build-fail":
			failed = true
		case "output":
			b := output[k]
			if b == nil {
				b = new(strings.Builder)
				output[k] = b
			}
			b.WriteString(ev.Output)
		case "pass", "fail", "skip":
			if ev.Test == "" { // the package
				status := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[ev.Action]
				fmt.Fprintf(w, "%s\t%s\t%.3fs\n", status, ev.Package, ev.Elapsed)
				if ev.Action == "fail" {
					failed = true
					if b := output[k]; b != nil && !hasTestFailure(failedTests, ev.Package) {
						fmt.Fprint(w, indent(b.String())) // a build failure, a panic outside a test, a timeout
					}
				}
				continue
			}
			switch ev.Action {
			case "pass":
				passed = append(passed, k)
			case "skip":
				skipped = append(skipped, k)
			case "fail":
				failedTests = append(failedTests, k)
				failed = true
				fmt.Fprintf(w, "--- FAIL: %s (%s)\n", ev.Test, ev.Package)
				if b := output[k]; b != nil {
					fmt.Fprint(w, indent(b.String()))
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped (%d):\n", len(skipped))
		for _, k := range skipped {
			reason := skipReason(output[k])
			if reason == "" {
				reason = "(no reason given: the test should say why it skips)"
			}
			fmt.Fprintf(w, "  %s %s: %s\n", short(k.pkg), k.test, reason)
		}
	}
	if len(failedTests) > 0 { // their output is above, between the package lines
		fmt.Fprintf(w, "\nfailed (%d):\n", len(failedTests))
		for _, k := range failedTests {
			fmt.Fprintf(w, "  %s %s\n", short(k.pkg), k.test)
		}
	}
	fmt.Fprintf(w, "\ntests: %d passed, %d skipped, %d failed\n", len(passed), len(skipped), len(failedTests))
	return failed, nil
}

func hasTestFailure(failed []key, pkg string) bool {
	return slices.ContainsFunc(failed, func(k key) bool { return k.pkg == pkg })
}

// skipReason is the message a skipped test gave (t.Skip's argument), or "" when it gave none.
func skipReason(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	var reason []string
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		reason = append(reason, l)
	}
	return strings.Join(reason, " ")
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/layerstream/layerstream/")
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}
