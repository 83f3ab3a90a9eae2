package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the path every package of Atelier's starts with.
const module = "atelier"

// listedPackage is what the tests of the module's layout read of a
// package from `go list -json`.
type listedPackage struct {
	ImportPath string
	Imports    []string // of its non-test files
}

// listPackages runs `go list -json ./...` in the module and answers its
// packages, keyed by their path inside the module ("server",
// "storage/codestore"; "main" for the module's root).
func listPackages(t *testing.T) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's answer: %v", err)
		}
		pkgs[packageName(p.ImportPath)] = p
	}
	return pkgs
}

// packageName is an import path inside the module as the map names it,
// "" for one outside the module.
func packageName(importPath string) string {
	if importPath == module {
		return "main"
	}
	name, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		return ""
	}
	return name
}

// isRig says whether a package exists for tests and measurements only:
// the rigs under testrig/, and the commands that drive a live server
// (cmd/abuse, cmd/bench).
func isRig(name string) bool {
	return strings.HasPrefix(name, "testrig/") || strings.HasPrefix(name, "cmd/")
}

// TestProductionImportsNoRig: no package of the server's own, in its
// non-test files, imports a test rig (testrig/...), so what ships never
// carries a test's database launcher, MinIO or hostile repositories;
// the rigs and the commands built on them import what they like.
func TestProductionImportsNoRig(t *testing.T) {
	pkgs := listPackages(t)
	var bad []string
	for name, p := range pkgs {
		if isRig(name) {
			continue
		}
		for _, imp := range p.Imports {
			if dep := packageName(imp); isRig(dep) {
				bad = append(bad, name+" → "+dep)
			}
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Fatalf("production packages import test rigs (move the code they need out of testrig/, or the package into it):\n%s",
			strings.Join(bad, "\n"))
	}
	if _, ok := pkgs["testrig/pgtest"]; !ok {
		t.Fatal("go list shows no testrig/pgtest; the test reads the wrong module")
	}
}

// mapDoc is the document whose import table TestArchitectureMapIsTrue
// holds to the code, and mapHeading the heading of that table.
const (
	mapDoc     = "docs/architecture.md"
	mapHeading = "## Packages and who imports whom"
)

// TestArchitectureMapIsTrue: the table "Packages and who imports whom" in
// docs/architecture.md draws exactly the imports between Atelier's
// packages that their non-test files make: every package outside testrig/
// has a row, every arrow of a row is an import, every import is an arrow,
// and every arrow points down to a row below its own. A failure names each
// arrow to add, remove or turn down.
func TestArchitectureMapIsTrue(t *testing.T) {
	doc, err := os.ReadFile(mapDoc)
	if err != nil {
		t.Fatal(err)
	}
	drawn, order, err := parseImportMap(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", mapDoc, err)
	}
	pkgs := listPackages(t)
	var problems []string
	for name, p := range pkgs {
		if strings.HasPrefix(name, "testrig/") {
			continue
		}
		arrows, ok := drawn[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("package %s has no row; add one (%s)", name, describeImports(name, p)))
			continue
		}
		imported := map[string]bool{}
		for _, imp := range p.Imports {
			if dep := packageName(imp); dep != "" {
				imported[dep] = true
				if !arrows[dep] {
					problems = append(problems, fmt.Sprintf("missing arrow %s → %s (%s imports %s)", name, dep, name, imp))
				}
			}
		}
		for dep := range arrows {
			if !imported[dep] {
				problems = append(problems, fmt.Sprintf("extra arrow %s → %s (%s does not import %s/%s)", name, dep, name, module, dep))
			}
		}
	}
	for name, arrows := range drawn {
		if _, ok := pkgs[name]; !ok || strings.HasPrefix(name, "testrig/") {
			problems = append(problems, fmt.Sprintf("row %s names no package of the module outside testrig/; remove it", name))
		}
		for dep := range arrows {
			if at, ok := order[dep]; ok && at < order[name] {
				problems = append(problems, fmt.Sprintf("arrow %s → %s points up; move %s's row below %s's", name, dep, dep, name))
			}
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		t.Fatalf("%s's table %q differs from the code:\n%s", mapDoc, strings.TrimPrefix(mapHeading, "## "), strings.Join(problems, "\n"))
	}
}

// describeImports is what a new row for the package would say.
func describeImports(name string, p listedPackage) string {
	var deps []string
	for _, imp := range p.Imports {
		if dep := packageName(imp); dep != "" {
			deps = append(deps, dep)
		}
	}
	if len(deps) == 0 {
		return name + " imports no Atelier package"
	}
	return name + " → " + strings.Join(deps, ", ")
}

// parseImportMap reads the table in the first code block after
// mapHeading: a row starts in the first column with one package's path
// inside the module, then "→" and the packages it imports, separated by
// commas, or no arrow when it imports none. A line that starts with a
// space continues the row above it; text in parentheses, which may span
// lines, is for people and is skipped. It answers each row's arrows, and
// each row's place from the top.
func parseImportMap(doc string) (drawn map[string]map[string]bool, order map[string]int, err error) {
	_, after, ok := strings.Cut(doc, "\n"+mapHeading+"\n")
	if !ok {
		return nil, nil, fmt.Errorf("no heading %q", mapHeading)
	}
	_, after, ok = strings.Cut(after, "```\n")
	if !ok {
		return nil, nil, fmt.Errorf("no code block after %q", mapHeading)
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		return nil, nil, fmt.Errorf("the code block after %q does not end", mapHeading)
	}
	// Rows, their continuation lines joined on.
	var rows []string
	for line := range strings.Lines(block) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.TrimSpace(line) == "":
		case line[0] == ' ' || line[0] == '\t':
			if len(rows) == 0 {
				return nil, nil, fmt.Errorf("the table starts with a continuation line: %q", line)
			}
			rows[len(rows)-1] += " " + strings.TrimSpace(line)
		default:
			rows = append(rows, line)
		}
	}
	drawn, order = map[string]map[string]bool{}, map[string]int{}
	for i, row := range rows {
		text, err := withoutNotes(row)
		if err != nil {
			return nil, nil, fmt.Errorf("row %q: %w", row, err)
		}
		name, deps, _ := strings.Cut(text, "→")
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " ,") {
			return nil, nil, fmt.Errorf("row %q: want one package's path before the arrow", row)
		}
		if _, dup := drawn[name]; dup {
			return nil, nil, fmt.Errorf("two rows for %s", name)
		}
		arrows := map[string]bool{}
		for dep := range strings.SplitSeq(deps, ",") {
			if dep = strings.TrimSpace(dep); dep == "" {
				continue
			}
			if strings.Contains(dep, " ") {
				return nil, nil, fmt.Errorf("row %q: %q is no package's path", row, dep)
			}
			arrows[dep] = true
		}
		drawn[name], order[name] = arrows, i
	}
	return drawn, order, nil
}

// withoutNotes is s without its parenthesized notes (nested ones too).
func withoutNotes(s string) (string, error) {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			if depth == 0 {
				return "", errors.New("a ')' closes no '('")
			}
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	if depth != 0 {
		return "", errors.New("a '(' is never closed")
	}
	return b.String(), nil
}

// TestReadmeMapNamesEveryFolder: the README's map (the code block under
// "## Architecture") has a line for every top-level folder that holds a
// package, and none for a folder that holds none.
func TestReadmeMapNamesEveryFolder(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n## Architecture\n")
	if !ok {
		t.Fatal(`README.md has no "## Architecture" section`)
	}
	_, after, ok = strings.Cut(after, "```\n")
	if !ok {
		t.Fatal("README.md's Architecture section has no code block")
	}
	block, _, _ := strings.Cut(after, "```")
	listed := map[string]bool{}
	for line := range strings.Lines(block) {
		if line == "" || line[0] == ' ' || line[0] == '\n' {
			continue
		}
		listed[strings.Fields(line)[0]] = true
	}
	folders := map[string]bool{}
	for name := range listPackages(t) {
		if name == "main" {
			folders["main.go"] = true
			continue
		}
		top, _, _ := strings.Cut(name, "/")
		folders[top+"/"] = true
	}
	var problems []string
	for f := range folders {
		if !listed[f] {
			problems = append(problems, "missing: "+f)
		}
	}
	for f := range listed {
		if !folders[f] {
			problems = append(problems, "holds no package: "+f)
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		t.Fatalf("README.md's map of folders differs from the code:\n%s", strings.Join(problems, "\n"))
	}
}
