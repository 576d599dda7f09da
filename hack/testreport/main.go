// Command testreport sums `go test -json` result files into one line per test
// tier and a total, and fails when any test failed, any package did not build
// or run, a tier ran no test, or (on CI) any test skipped.
//
//	testreport unit=unit.json kernel=kernel.json ...
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is the part of a test2json event this tool reads.
type event struct {
	Action  string
	Package string
	Test    string
}

type tally struct {
	passed, failed, skipped int
	brokenPackages          []string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport tier=results.json ...")
		os.Exit(2)
	}
	onCI := os.Getenv("CI") == "true"
	var total tally
	ok := true
	for _, arg := range os.Args[1:] {
		tier, path, found := strings.Cut(arg, "=")
		if !found {
			fmt.Fprintf(os.Stderr, "testreport: %q is not tier=path\n", arg)
			os.Exit(2)
		}
		t, err := readTally(path)
		if err != nil {
			fmt.Printf("%s: tier did not run: %v\n", tier, err)
			ok = false
			continue
		}
		line := fmt.Sprintf("%s: %d passed, %d failed", tier, t.passed, t.failed)
		if t.skipped > 0 {
			line += fmt.Sprintf(", %d skipped", t.skipped)
		}
		fmt.Println(line)
		for _, p := range t.brokenPackages {
			fmt.Printf("%s: package %s failed outside any test (build error, panic or TestMain)\n", tier, p)
		}
		switch {
		case t.failed > 0 || len(t.brokenPackages) > 0:
			ok = false
		case t.passed == 0:
			fmt.Printf("%s: ran no test\n", tier)
			ok = false
		case onCI && t.skipped > 0:
			fmt.Printf("%s: %d tests skipped; nothing may skip on CI\n", tier, t.skipped)
			ok = false
		}
		total.passed += t.passed
		total.failed += t.failed + len(t.brokenPackages)
		total.skipped += t.skipped
	}
	line := fmt.Sprintf("total: %d passed, %d failed", total.passed, total.failed)
	if total.skipped > 0 {
		line += fmt.Sprintf(", %d skipped", total.skipped)
	}
	fmt.Println(line)
	if !ok {
		os.Exit(1)
	}
}

func readTally(path string) (tally, error) {
	f, err := os.Open(path)
	if err != nil {
		return tally{}, err
	}
	defer f.Close()
	return count(f)
}

// count tallies test results. A package that fails with no failed test in it
// did not build or run, and counts as broken.
func count(r io.Reader) (tally, error) {
	var t tally
	failedTests := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // build output that go test interleaves as plain text
		}
		switch {
		case e.Test != "" && e.Action == "pass":
			t.passed++
		case e.Test != "" && e.Action == "fail":
			t.failed++
			failedTests[e.Package]++
		case e.Test != "" && e.Action == "skip":
			t.skipped++
		case e.Test == "" && e.Action == "fail" && failedTests[e.Package] == 0:
			t.brokenPackages = append(t.brokenPackages, e.Package)
		}
	}
	return t, sc.Err()
}
