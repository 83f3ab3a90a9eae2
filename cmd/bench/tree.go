package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tree is a generated source tree: files of Go-like text about the size of
// the Go distribution's, 100 to a folder, and its .tar.gz.
type tree struct {
	files   map[string][]byte
	archive []byte
}

// makeTree makes a tree of n files. Trees of different variants share no
// file content, so importing one after another stores every object again,
// as a new project's import does, rather than finding them stored already.
func makeTree(n, variant int) (*tree, error) {
	t := &tree{files: make(map[string][]byte, n)}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for i := range n {
		name := fmt.Sprintf("pkg%03d/file%03d.go", i/100, i%100)
		var body strings.Builder
		fmt.Fprintf(&body, "// Variant %d of the bench's tree.\npackage pkg%03d\n\n", variant, i/100)
		for f := range 40 {
			fmt.Fprintf(&body, "// F%d_%d returns a number only this file has.\nfunc F%d_%d() int { return %d }\n\n", i, f, i, f, i*40+f)
		}
		data := []byte(body.String())
		t.files[name] = data
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	t.archive = buf.Bytes()
	return t, nil
}

func (t *tree) write(dir string) error {
	for name, data := range t.files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
