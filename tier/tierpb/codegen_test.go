package tierpb_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/thawdb/thaw/gen/thaw/tier/v1" // registers the descriptors
)

// TestGeneratedCodeMatchesProtos checks that every .proto file under proto/ is
// compiled into the committed generated code: its descriptor is registered
// under the same path and package, and it declares the same messages, fields
// (name and number), enums, values, services and RPCs (with their types) as
// the source. It reads the source with a line scanner that knows only the
// one-declaration-per-line layout of proto/; a mismatch means: run
// scripts/gen-proto.sh.
func TestGeneratedCodeMatchesProtos(t *testing.T) {
	const root = "../../proto"
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .proto files")
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			fd, err := protoregistry.GlobalFiles.FindFileByPath(name)
			if err != nil {
				t.Fatalf("not in the generated code (run scripts/gen-proto.sh): %v", err)
			}
			pkg, want := scanProto(string(src))
			if string(fd.Package()) != pkg {
				t.Errorf("package %q, generated %q", pkg, fd.Package())
			}
			if got := describe(fd); !slices.Equal(got, want) {
				t.Errorf("generated code is stale (run scripts/gen-proto.sh)\nsource:    %q\ngenerated: %q", want, got)
			}
		})
	}
}

var (
	reBlock   = regexp.MustCompile(`^(message|enum|service|oneof)\s+(\w+)\s*\{`)
	reField   = regexp.MustCompile(`(\w+)\s*=\s*(\d+)\s*;$`)
	reRPC     = regexp.MustCompile(`^rpc\s+(\w+)\s*\(\s*([\w.]+)\s*\)\s*returns\s*\(\s*([\w.]+)\s*\)`)
	rePackage = regexp.MustCompile(`^package\s+([\w.]+)\s*;`)
)

// scanProto returns the package of a .proto source and its declarations in
// the form describe prints them, sorted.
func scanProto(src string) (pkg string, decls []string) {
	var stack []string // enclosing declarations: "message Foo", "oneof bar", ...
	for line := range strings.Lines(src) {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if m := rePackage.FindStringSubmatch(line); m != nil {
			pkg = m[1]
		}
		if m := reBlock.FindStringSubmatch(line); m != nil {
			if m[1] != "oneof" {
				decls = append(decls, m[1]+" "+m[2])
			}
			stack = append(stack, m[1]+" "+m[2])
			continue
		}
		if line == "}" && len(stack) > 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		if len(stack) == 0 {
			continue
		}
		// The message, enum or service owning the line (skipping a oneof).
		owner := stack[len(stack)-1]
		if strings.HasPrefix(owner, "oneof ") && len(stack) > 1 {
			owner = stack[len(stack)-2]
		}
		if m := reRPC.FindStringSubmatch(line); m != nil && strings.HasPrefix(owner, "service ") {
			decls = append(decls, owner+" rpc "+m[1]+"("+m[2]+") "+m[3])
		} else if m := reField.FindStringSubmatch(line); m != nil {
			decls = append(decls, owner+" "+m[1]+"="+m[2])
		}
	}
	slices.Sort(decls)
	return pkg, decls
}

// describe lists a file descriptor's declarations like scanProto, sorted.
func describe(fd protoreflect.FileDescriptor) []string {
	var decls []string
	for i := range fd.Messages().Len() {
		m := fd.Messages().Get(i)
		decls = append(decls, "message "+string(m.Name()))
		for j := range m.Fields().Len() {
			f := m.Fields().Get(j)
			decls = append(decls, "message "+string(m.Name())+" "+string(f.Name())+"="+strconv.Itoa(int(f.Number())))
		}
	}
	for i := range fd.Enums().Len() {
		e := fd.Enums().Get(i)
		decls = append(decls, "enum "+string(e.Name()))
		for j := range e.Values().Len() {
			v := e.Values().Get(j)
			decls = append(decls, "enum "+string(e.Name())+" "+string(v.Name())+"="+strconv.Itoa(int(v.Number())))
		}
	}
	for i := range fd.Services().Len() {
		s := fd.Services().Get(i)
		decls = append(decls, "service "+string(s.Name()))
		for j := range s.Methods().Len() {
			m := s.Methods().Get(j)
			decls = append(decls, "service "+string(s.Name())+" rpc "+string(m.Name())+
				"("+string(m.Input().Name())+") "+string(m.Output().Name()))
		}
	}
	slices.Sort(decls)
	return decls
}
