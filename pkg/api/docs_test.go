package api

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docSection returns the lines of the section of a doc under heading, up to the next heading.
func docSection(t *testing.T, path, heading string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := slices.Index(lines, heading)
	if start < 0 {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	end := start + 1
	for end < len(lines) && !strings.HasPrefix(lines[end], "#") {
		end++
	}
	return lines[start+1 : end]
}

// docTable returns the cells of the table in a doc's section, header and separator left out.
func docTable(t *testing.T, path, heading string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range docSection(t, path, heading) {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		line = strings.ReplaceAll(strings.Trim(line, "|"), `\|`, "\x00") // an escaped | is text
		var cells []string
		for _, c := range strings.Split(line, "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("%s: no table under %q", path, heading)
	}
	return rows[1:]
}

// TestAPIDocsListEveryCode checks docs/api.md's error table: every declared code, with its status.
func TestAPIDocsListEveryCode(t *testing.T) {
	documented := map[ErrorCode]string{}
	for _, row := range docTable(t, "../../docs/api.md", "## Errors") {
		code := ErrorCode(strings.Trim(row[0], "`"))
		if _, dup := documented[code]; dup {
			t.Errorf("docs/api.md lists %s twice", code)
		}
		documented[code] = row[1]
	}
	known := map[ErrorCode]bool{}
	for name, code := range declared[ErrorCode](t) {
		known[code] = true
		status, ok := documented[code]
		if !ok {
			t.Errorf("docs/api.md does not list %s (%s)", code, name)
		} else if want := strconv.Itoa(code.HTTPStatus()); status != want {
			t.Errorf("docs/api.md gives %s status %s, the code sends %s", code, status, want)
		}
	}
	for code := range documented {
		if !known[code] {
			t.Errorf("docs/api.md lists %q, which is no error code", code)
		}
	}
}

// TestCLIDocsListEveryExitCode checks docs/cli.md's exit-code table: a row for every exit code,
// and every error code in the row of its exit code and in no other. Codes that exit 1 ("any
// other failure") need not be listed.
func TestCLIDocsListEveryExitCode(t *testing.T) {
	exits := declaredExitCodes(t)
	codeRE := regexp.MustCompile("`([a-z]+(?:_[a-z]+)*)`")
	listed := map[ErrorCode][]int{} // code → the rows naming it
	rows := map[int]bool{}
	for _, row := range docTable(t, "../../docs/cli.md", "## Exit codes") {
		exit, err := strconv.Atoi(row[0])
		if err != nil {
			t.Fatalf("docs/cli.md exit-code row %q: %v", row, err)
		}
		if _, ok := exits[exit]; !ok {
			t.Errorf("docs/cli.md documents exit code %d, which pkg/api does not declare", exit)
		}
		rows[exit] = true
		for _, m := range codeRE.FindAllStringSubmatch(row[1], -1) {
			listed[ErrorCode(m[1])] = append(listed[ErrorCode(m[1])], exit)
		}
	}
	for exit, name := range exits {
		if !rows[exit] {
			t.Errorf("docs/cli.md has no row for exit code %d (%s)", exit, name)
		}
	}
	known := map[ErrorCode]bool{}
	for _, code := range declared[ErrorCode](t) {
		known[code] = true
		want, got := code.ExitCode(), listed[code]
		switch {
		case want == ExitCodeError && (len(got) == 0 || slices.Equal(got, []int{ExitCodeError})):
		case len(got) == 0:
			t.Errorf("docs/cli.md does not list %s in the row of exit code %d", code, want)
		case !slices.Equal(got, []int{want}):
			t.Errorf("docs/cli.md lists %s in the row(s) of exit code %v; it exits %d", code, got, want)
		}
	}
	for code := range listed {
		if !known[code] {
			t.Errorf("docs/cli.md's exit codes name %q, which is no error code", code)
		}
	}
}

// TestCLIDocsGiveTheLimits checks the limits docs/cli.md gives against the ones the API enforces.
func TestCLIDocsGiveTheLimits(t *testing.T) {
	flags := map[string][]string{}
	for _, row := range docTable(t, "../../docs/cli.md", "## hiloop sandbox create NAME") {
		flags[row[0]] = row[1:]
	}
	for _, tc := range []struct{ flag, def, limits string }{
		{"`--workspace-gib N`", strconv.Itoa(DefaultWorkspaceGiB), fmt.Sprintf("(%d-%d)", MinWorkspaceGiB, MaxWorkspaceGiB)},
		{"`--cpus N`", fmt.Sprint(DefaultCPUs), fmt.Sprintf("(%g-%g)", MinCPUs, MaxCPUs)},
		{"`--memory-mb N`", strconv.Itoa(DefaultMemoryMB), fmt.Sprintf("(%d-%d)", MinMemoryMB, MaxMemoryMB)},
	} {
		row, ok := flags[tc.flag]
		if !ok || len(row) < 2 || row[0] != tc.def || !strings.Contains(row[1], tc.limits) {
			t.Errorf("docs/cli.md: create's %s row is %q; want default %s and %s", tc.flag, row, tc.def, tc.limits)
		}
	}
	grow := strings.Join(docSection(t, "../../docs/cli.md", "## hiloop sandbox grow NAME --workspace-gib N"), " ")
	if want := fmt.Sprintf("at most %d", MaxWorkspaceGiB); !strings.Contains(grow, want) {
		t.Errorf("docs/cli.md's grow section does not say %q", want)
	}
}
