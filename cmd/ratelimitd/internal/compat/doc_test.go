package compat_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// TestMigratingTable: the variables in the first column of docs/migrating.md's tables, under "Environment
// variables", are exactly those the package knows, so that neither the table nor the package can leave one out.
func TestMigratingTable(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Environment variables\n")
	if !ok {
		t.Fatal(`docs/migrating.md has no "## Environment variables" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([^`]*)`")
	var documented []string
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			if slices.Contains(documented, m[1]) {
				t.Errorf("%s is in the table twice", m[1])
			}
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)
	if diff := cmp.Diff(compat.Variables(), documented); diff != "" {
		t.Errorf("docs/migrating.md's table and Variables differ (-Variables +table):\n%s", diff)
	}
}
