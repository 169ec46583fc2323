package fibril

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fibrilmq/fibril"

// importRules maps a package (or, ending in "/...", a tree) to the broker
// packages it may import; every other broker package is a violation.
var importRules = map[string][]string{
	"storage/...":           {"storage/..."},
	"wire":                  {},
	"replication":           {},
	"runtime":               {},
	"cluster":               {"replication", "wire", "tlsconfig", "cluster/rafttransport"},
	"cluster/rafttransport": {"tlsconfig", "wire", "netlimit"},
	"netlimit":              {},
	"access":                {"wire"},
	"client":                {"wire", "tlsconfig"},
	"tlsconfig":             {"wire"}, // known exception: the plain-text refusal frame
	"admin":                 {"access", "actors", "storage/queue", "wire", "client"},
	"actors":                {"access", "cluster", "cluster/rafttransport", "netlimit", "replication", "runtime", "storage/...", "tlsconfig", "wire"},
}

// knownExceptions are rules the layout wants and the code does not meet
// yet. Each must still be broken: the test fails once one holds, so the
// list only shrinks.
var knownExceptions = []struct {
	pkg, imports string
}{
	{"tlsconfig", "wire"},
	{"admin", "client"},
}

// maxPackageLines is the size past which a package (without its tests)
// should be split; oversizedPackages are the known exceptions.
const maxPackageLines = 6500

var oversizedPackages = []string{"actors"}

type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
}

func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var packages []listedPackage
	decoder := json.NewDecoder(strings.NewReader(string(out)))
	for decoder.More() {
		var p listedPackage
		if err := decoder.Decode(&p); err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		packages = append(packages, p)
	}
	return packages
}

func relative(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

// matches reports whether pkg is rule, or lies in rule's tree.
func matches(rule, pkg string) bool {
	if tree, ok := strings.CutSuffix(rule, "/..."); ok {
		return pkg == tree || strings.HasPrefix(pkg, tree+"/")
	}
	return pkg == rule
}

func ruleFor(pkg string) (allowed []string, found bool) {
	for rule, allowed := range importRules {
		if matches(rule, pkg) {
			return allowed, true
		}
	}
	return nil, false
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	lines := 0
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		lines++
	}
	return lines
}

// TestPackageLayout checks doc.go's rules over `go list` of the module.
func TestPackageLayout(t *testing.T) {
	packages := listPackages(t)
	broken := map[[2]string]bool{}
	for _, p := range packages {
		pkg := relative(p.ImportPath)
		allowed, ruled := ruleFor(pkg)
		for _, imported := range p.Imports {
			if !strings.HasPrefix(imported, module) {
				continue
			}
			target := relative(imported)
			if matches(pkg, target) || strings.HasPrefix(target, pkg+"/") && strings.HasSuffix(pkg, "/...") {
				continue
			}
			if !ruled {
				continue
			}
			if !slices.ContainsFunc(allowed, func(rule string) bool { return matches(rule, target) }) {
				t.Errorf("%s imports %s, which the layout does not allow (doc.go)", pkg, target)
			}
			broken[[2]string{pkg, target}] = true
		}
	}
	for _, exception := range knownExceptions {
		if !broken[[2]string{exception.pkg, exception.imports}] {
			t.Errorf("%s no longer imports %s: take the exception out of layout_test.go and doc.go, and the allowance out of importRules",
				exception.pkg, exception.imports)
		}
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range packages {
		pkg, lines := relative(p.ImportPath), 0
		for _, name := range p.GoFiles {
			n := countLines(t, filepath.Join(p.Dir, name))
			lines += n
			if n > 800 {
				rel, _ := filepath.Rel(root, filepath.Join(p.Dir, name))
				t.Errorf("%s has %d lines; split it (no file past 800)", rel, n)
			}
		}
		oversized := lines > maxPackageLines
		if known := slices.Contains(oversizedPackages, pkg); oversized != known {
			t.Errorf("package %s has %d lines without tests (limit %d); the known oversized packages are %v",
				pkg, lines, maxPackageLines, oversizedPackages)
		}
	}
}
