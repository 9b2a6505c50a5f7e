// Command extract writes, at test time, a Go file that hands one table-driven test's table to
// the jobrules oracle as data.
//
//	go run extract/main.go SRC_DIR TEST_FUNC GO_FUNC OUT_FILE
//
// It parses the `_test.go` files of the package in SRC_DIR (a folder of the Go module cache),
// finds TEST_FUNC, the map literal it ranges over (`for name, tc := range X`) and X's definition,
// and writes OUT_FILE, in the same package, with a function GO_FUNC(t) that builds the same map
// (with the statements of TEST_FUNC before it that the map needs, and the package-level test
// declarations those need) and returns it as one map of fields per case name, the struct's
// fields by name. The compiler resolves every constant and helper, so the values are exactly
// those the test runs with. Only the standard library is used.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: extract SRC_DIR TEST_FUNC GO_FUNC OUT_FILE")
		os.Exit(2)
	}
	out, err := extract(os.Args[1], os.Args[2], os.Args[3])
	if err == nil {
		err = os.WriteFile(os.Args[4], out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "extract:", err)
		os.Exit(1)
	}
}

type source struct {
	fset    *token.FileSet
	pkg     string
	decls   map[string]ast.Node   // package-level names of the test files: their declarations
	methods map[string][]ast.Node // methods of the test files' types, by receiver type
	imports map[string]string     // local name -> import path, from the test files
	funcs   map[string]*ast.FuncDecl
}

func load(dir string) (*source, error) {
	s := &source{fset: token.NewFileSet(), decls: map[string]ast.Node{},
		methods: map[string][]ast.Node{}, imports: map[string]string{}, funcs: map[string]*ast.FuncDecl{}}
	names, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := parser.ParseFile(s.fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(f.Name.Name, "_test") {
			continue // an external test package: not ours to reach
		}
		s.pkg = f.Name.Name
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			local := packageName(p)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			if local == "_" || local == "." {
				continue
			}
			if _, seen := s.imports[local]; !seen {
				s.imports[local] = p
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					recv := receiverType(d.Recv.List[0].Type)
					s.methods[recv] = append(s.methods[recv], d)
					continue
				}
				s.decls[d.Name.Name] = d
				s.funcs[d.Name.Name] = d
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						one := &ast.GenDecl{Tok: d.Tok, Specs: []ast.Spec{spec}}
						for _, n := range spec.Names {
							s.decls[n.Name] = one
						}
					case *ast.TypeSpec:
						s.decls[spec.Name.Name] = &ast.GenDecl{Tok: d.Tok, Specs: []ast.Spec{spec}}
					}
				}
			}
		}
	}
	return s, nil
}

// packageName guesses the name an unaliased import is used by: its last element, less a
// major-version suffix.
func packageName(p string) string {
	last := path.Base(p)
	if strings.HasPrefix(last, "v") && len(last) > 1 && strings.Trim(last[1:], "0123456789") == "" {
		last = path.Base(path.Dir(p))
	}
	last = strings.TrimSuffix(last, ".go")
	if i := strings.LastIndexAny(last, ".-"); i >= 0 {
		last = last[i+1:]
	}
	return last
}

func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// idents are the names a node uses, less field and method names after a dot.
func idents(n ast.Node) map[string]bool {
	out := map[string]bool{}
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			ast.Inspect(n.X, func(m ast.Node) bool {
				if id, ok := m.(*ast.Ident); ok {
					out[id.Name] = true
				}
				return true
			})
			return false
		case *ast.Ident:
			out[n.Name] = true
		}
		return true
	})
	return out
}

// defined are the names a statement of a function body declares.
func defined(st ast.Stmt) []string {
	var out []string
	switch st := st.(type) {
	case *ast.AssignStmt:
		if st.Tok == token.DEFINE {
			for _, l := range st.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
					out = append(out, id.Name)
				}
			}
		}
	case *ast.DeclStmt:
		if g, ok := st.Decl.(*ast.GenDecl); ok {
			for _, spec := range g.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						if n.Name != "_" {
							out = append(out, n.Name)
						}
					}
				case *ast.TypeSpec:
					out = append(out, spec.Name.Name)
				}
			}
		}
	}
	return out
}

func extract(dir, testFunc, goFunc string) ([]byte, error) {
	s, err := load(dir)
	if err != nil {
		return nil, err
	}
	fn := s.funcs[testFunc]
	if fn == nil {
		return nil, fmt.Errorf("no func %s in %s", testFunc, dir)
	}
	// The table: what the first `for NAME, TC := range X` ranges over, and X's definition.
	var tableName string
	tableAt := -1
	for _, st := range fn.Body.List {
		if r, ok := st.(*ast.RangeStmt); ok && tableName == "" {
			if id, ok := r.X.(*ast.Ident); ok {
				tableName = id.Name
			}
		}
	}
	if tableName == "" {
		return nil, fmt.Errorf("%s ranges over no named table", testFunc)
	}
	var table *ast.CompositeLit
	for i, st := range fn.Body.List {
		for _, name := range defined(st) {
			if name == tableName {
				tableAt = i
			}
		}
		if tableAt == i {
			if a, ok := st.(*ast.AssignStmt); ok && len(a.Rhs) == 1 {
				table, _ = a.Rhs[0].(*ast.CompositeLit)
			}
			break
		}
	}
	if table == nil {
		return nil, fmt.Errorf("%s: %s is not defined by a composite literal", testFunc, tableName)
	}
	mt, ok := table.Type.(*ast.MapType)
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a map literal", testFunc, tableName)
	}
	st, ok := mt.Value.(*ast.StructType)
	if !ok {
		return nil, fmt.Errorf("%s: %s's values are not an anonymous struct", testFunc, tableName)
	}
	var fields []string
	for _, f := range st.Fields.List {
		for _, n := range f.Names {
			fields = append(fields, n.Name)
		}
	}

	// The statements before the table that it needs, transitively.
	needed := idents(fn.Body.List[tableAt])
	keep := make([]bool, tableAt)
	var locals []string
	for i := tableAt - 1; i >= 0; i-- {
		names := defined(fn.Body.List[i])
		use := false
		for _, n := range names {
			use = use || needed[n]
		}
		if !use {
			continue
		}
		keep[i] = true
		locals = append(locals, names...)
		for n := range idents(fn.Body.List[i]) {
			needed[n] = true
		}
	}
	var body []ast.Stmt
	for i := 0; i < tableAt; i++ {
		if keep[i] {
			body = append(body, fn.Body.List[i])
		}
	}
	body = append(body, fn.Body.List[tableAt])

	// The package-level test declarations they need, transitively (types with their methods).
	var decls []ast.Node
	taken := map[string]bool{testFunc: true}
	queue := []map[string]bool{needed}
	for len(queue) > 0 {
		names := queue[0]
		queue = queue[1:]
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		for _, n := range sorted {
			d, ok := s.decls[n]
			if !ok || taken[n] {
				continue
			}
			taken[n] = true
			if g, ok := d.(*ast.GenDecl); ok {
				for _, spec := range g.Specs {
					if v, ok := spec.(*ast.ValueSpec); ok {
						for _, other := range v.Names {
							taken[other.Name] = true
						}
					}
				}
			}
			decls = append(decls, d)
			queue = append(queue, idents(d))
			for _, m := range s.methods[n] {
				decls = append(decls, m)
				queue = append(queue, idents(m))
			}
		}
	}

	// The imports all of it uses.
	used := map[string]bool{"testing": true}
	var all []ast.Node
	all = append(all, decls...)
	for _, b := range body {
		all = append(all, b)
	}
	for _, n := range all {
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if _, isImport := s.imports[id.Name]; isImport {
						used[id.Name] = true
					}
				}
			}
			return true
		})
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "// Code generated at test time by the jobrules oracle from %s. DO NOT EDIT.\n\n", testFunc)
	fmt.Fprintf(&buf, "package %s\n\nimport (\n", s.pkg)
	var locs []string
	for l := range used {
		locs = append(locs, l)
	}
	sort.Strings(locs)
	for _, l := range locs {
		p := s.imports[l]
		if l == "testing" {
			p = "testing"
		}
		fmt.Fprintf(&buf, "\t%s %q\n", l, p)
	}
	buf.WriteString(")\n\n")
	cfg := printer.Config{Mode: printer.UseSpaces | printer.TabIndent, Tabwidth: 8}
	for _, d := range decls {
		if err := cfg.Fprint(&buf, s.fset, d); err != nil {
			return nil, err
		}
		buf.WriteString("\n\n")
	}
	fmt.Fprintf(&buf, "func %s(t *testing.T) map[string]map[string]any {\n", goFunc)
	for _, b := range body {
		if err := cfg.Fprint(&buf, s.fset, b); err != nil {
			return nil, err
		}
		buf.WriteString("\n")
	}
	buf.WriteString("_ = t\n")
	for _, l := range locals {
		fmt.Fprintf(&buf, "_ = %s\n", l)
	}
	buf.WriteString("out := map[string]map[string]any{}\n")
	fmt.Fprintf(&buf, "for name, tc := range %s {\nout[name] = map[string]any{\n", tableName)
	for _, f := range fields {
		fmt.Fprintf(&buf, "%q: tc.%s,\n", f, f)
	}
	buf.WriteString("}\n}\nreturn out\n}\n")
	formatted, err := format.Source(buf.Bytes())
	if err != nil {
		return buf.Bytes(), fmt.Errorf("the generated file does not parse: %v", err)
	}
	return formatted, nil
}
