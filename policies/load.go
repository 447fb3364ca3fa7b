package policies

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Load parses policy files. Each path is a file (parsed whatever its name)
// or a directory, whose *.yaml and *.yml files (not subdirectories) are
// parsed in name order. Policy names must be unique across everything
// loaded. Problems in the documents are reported together as Errors; an
// unreadable path is an ordinary error.
func Load(paths ...string) ([]*Policy, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	var (
		out  []*Policy
		errs Errors
		seen = map[string]*Policy{}
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("policies: load: %w", err)
		}
		pols, err := Parse(data, f)
		if es, ok := err.(Errors); ok {
			errs = append(errs, es...)
			continue
		}
		for _, p := range pols {
			if first, dup := seen[p.name]; dup {
				errs = append(errs, &Error{File: f, Line: p.line, Column: p.col, Field: "metadata.name",
					Msg: fmt.Sprintf("duplicate policy name %q (first defined at %s:%d:%d)", p.name, first.file, first.line, first.col)})
				continue
			}
			seen[p.name] = p
			out = append(out, p)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// Files lists the files Load parses for paths, in the order it parses
// them: a file path as it is, a directory's *.yaml and *.yml files (not
// subdirectories; a symlink to a file is followed, one that leads nowhere
// is an error) in name order.
func Files(paths ...string) ([]string, error) {
	var files []string
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("policies: load: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, path)
			continue
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("policies: load: %w", err)
		}
		var names []string
		for _, e := range entries {
			ext := strings.ToLower(filepath.Ext(e.Name()))
			if ext != ".yaml" && ext != ".yml" {
				continue
			}
			regular := e.Type().IsRegular()
			if e.Type()&fs.ModeSymlink != 0 {
				// Followed, as a Kubernetes ConfigMap volume's files all are.
				fi, err := os.Stat(filepath.Join(path, e.Name()))
				if err != nil {
					return nil, fmt.Errorf("policies: load: %w", err)
				}
				regular = fi.Mode().IsRegular()
			}
			if regular {
				names = append(names, e.Name())
			}
		}
		slices.Sort(names)
		for _, n := range names {
			files = append(files, filepath.Join(path, n))
		}
	}
	return files, nil
}
