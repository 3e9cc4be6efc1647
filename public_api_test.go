package flechtwerk_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublicAPINamesNoInternalType checks that the documentation of every
// public package of the module (go doc -all) names no identifier of an
// internal package: no exported function, method, field, alias, variable
// or constant takes, returns, holds or is initialized from an internal
// type, so everything a user can call can be called with public types.
//
// A line is flagged when it names an identifier (pkg.Exported) of a
// package the public package imports from internal/ (under the name it
// imports it by), or of any internal package whose name no public package
// shares (so that sink.Stage, the public sink package, is not mistaken for
// the engine of the same name).
func TestPublicAPINamesNoInternalType(t *testing.T) {
	internalNames := map[string]string{} // import path -> package name
	for _, l := range goList(t, "-f", "{{.ImportPath}} {{.Name}}", "./...") {
		p, name, _ := strings.Cut(l, " ")
		if isInternal(p) {
			internalNames[p] = name
		}
	}
	require.NotEmpty(t, internalNames, "go list found no internal package")

	public := map[string]bool{}
	type pkg struct{ path, dir, name string }
	var pkgs []pkg
	for _, l := range goList(t, "-f", "{{.ImportPath}}\t{{.Dir}}\t{{.Name}}", "./...") {
		f := strings.Split(l, "\t")
		require.Len(t, f, 3, l)
		if isInternal(f[0]) {
			continue
		}
		public[f[2]] = true
		pkgs = append(pkgs, pkg{f[0], f[1], f[2]})
	}
	require.NotEmpty(t, pkgs)

	global := map[string]bool{}
	for _, name := range internalNames {
		if !public[name] {
			global[name] = true
		}
	}

	var found []string
	for _, p := range pkgs {
		names := imported(t, p.dir, internalNames)
		for n := range global {
			names[n] = true
		}
		re := identRE(names)
		out, err := exec.Command("go", "doc", "-all", p.path).CombinedOutput()
		require.NoError(t, err, "go doc -all %s: %s", p.path, out)
		for i, line := range strings.Split(string(out), "\n") {
			if re.MatchString(line) {
				found = append(found, p.path+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
	}
	if len(found) > 0 {
		require.FailNow(t, "go doc -all names internal identifiers", "\n%s", strings.Join(found, "\n"))
	}
}

// isInternal reports whether the import path p is an internal package.
func isInternal(p string) bool {
	return strings.HasSuffix(p, "/internal") || strings.Contains(p, "/internal/")
}

// goList runs go list with args in the module root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	require.NoError(t, err, "go list %v", args)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// imported returns the names by which the non-test Go files of the package
// in dir import the packages of internalNames (an import's alias, else the
// package's name).
func imported(t *testing.T, dir string, internalNames map[string]string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			require.NoError(t, err)
			name, ok := internalNames[p]
			if !ok {
				continue
			}
			if im.Name != nil {
				name = im.Name.Name
			}
			if name != "_" && name != "." {
				names[name] = true
			}
		}
	}
	return names
}

// identRE matches a qualified exported identifier of one of names.
func identRE(names map[string]bool) *regexp.Regexp {
	alts := make([]string, 0, len(names))
	for n := range names {
		alts = append(alts, regexp.QuoteMeta(n))
	}
	sort.Strings(alts)
	if len(alts) == 0 {
		return regexp.MustCompile(`$.^`)
	}
	return regexp.MustCompile(`(^|[^\w.])(` + strings.Join(alts, "|") + `)\.[A-Z]`)
}
