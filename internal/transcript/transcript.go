// Package transcript runs the transcript tests of tide's state machines
// (STYLE.md §3.11): a testdata file is a sequence of blocks separated by
// blank lines, '#' lines being comments,
//
//	<command line>
//	----
//	<expected output>
//
// Each command goes to a runner the test provides; its output is compared
// with the expected lines, or, with rewrite set, written back into the file.
package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Runner executes one command line and returns its output. An error fails
// the test at that line.
type Runner func(cmd string) (string, error)

// RunAll runs every file matching glob as a subtest named after the file,
// each with a fresh runner from newRunner.
func RunAll(t *testing.T, glob string, rewrite bool, newRunner func(t *testing.T) Runner) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no transcripts match %s", glob)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), func(t *testing.T) {
			Run(t, file, rewrite, newRunner(t))
		})
	}
}

// Run runs one transcript file through run.
func Run(t *testing.T, file string, rewrite bool, run Runner) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			out.WriteString(l + "\n")
			continue
		}
		line := i + 1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, line, l)
		}
		var expected []string
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			expected = append(expected, lines[i])
		}
		i-- // the blank line (or EOF) is written as it is
		got, err := run(l)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", file, line, l, err)
		}
		got = strings.TrimRight(got, "\n")
		fmt.Fprintf(&out, "%s\n----\n%s\n", l, got)
		if want := strings.Join(expected, "\n"); !rewrite && got != want {
			t.Errorf("%s:%d: %s\n--- got:\n%s\n--- want:\n%s", file, line, l, got, want)
		}
	}
	if rewrite {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
