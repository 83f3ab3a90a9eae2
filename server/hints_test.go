package server

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A server runs in Atelier's container only when its image says so
// (ATELIER_IN_CONTAINER, which the Dockerfile sets): being inside some
// container, as a server started by hand in a development container is,
// is not enough. This machine may well be such a container.
func TestInContainerIsSaidNotGuessed(t *testing.T) {
	load := func(v string) (Config, error) {
		return LoadConfig(func(key string) string {
			if key == "ATELIER_IN_CONTAINER" {
				return v
			}
			return ""
		})
	}
	_, dockerenv := os.Stat("/.dockerenv")
	if cfg, err := load(""); err != nil || cfg.InContainer {
		t.Errorf("unset (with /.dockerenv: %v): in a container %v, %v", dockerenv == nil, cfg.InContainer, err)
	}
	if cfg, err := load("true"); err != nil || !cfg.InContainer {
		t.Errorf("true: in a container %v, %v", cfg.InContainer, err)
	}
	if _, err := load("perhaps"); err == nil || !strings.Contains(err.Error(), "ATELIER_IN_CONTAINER") {
		t.Errorf("a bad value: %v", err)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ENV (.*\\\n)*\s*ATELIER_IN_CONTAINER=true\b`).Match(dockerfile) {
		t.Error("Atelier's image does not say it is Atelier's container (ENV ATELIER_IN_CONTAINER=true)")
	}
}

// Each refusal of a Local folder the server cannot see or write tells
// what to do where the server runs: on a server run natively, fix the
// path or make the folder there; in Atelier's container, the compose
// line that mounts it. Through the creation and through the live check.
func TestFolderHintsFitHowTheServerRuns(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "missing")
	for _, way := range []struct {
		name    string
		tweak   func(*Config)
		where   string   // in the message of a missing folder
		want    []string // in every hint
		wantNot []string // in no message or hint
	}{
		{"natively", func(*Config) {}, "on the server",
			[]string{"on the server"}, []string{"container", "compose", "volumes", "mount"}},
		{"in Atelier's container", func(c *Config) { c.InContainer = true }, "inside the server's container",
			[]string{"compose.yaml", "under volumes: of the atelier-a service", "at the same path"}, nil},
	} {
		t.Run(way.name, func(t *testing.T) {
			h := newHarness(t, way.tweak, func(c *Config) { c.LocalRoots = []string{base} })
			c := h.user("ann", false)
			for _, path := range []string{missing, file} {
				created := expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {path}}, jsonAccept),
					http.StatusBadRequest, map[string]string{missing: "path_not_found", file: "path_not_directory"}[path])
				live := c.validatePath(path)
				for _, got := range []struct{ from, message, hint string }{
					{"creation", created.Error, created.Hint}, {"live check", live.Message, live.Hint},
				} {
					if path == missing && !strings.Contains(got.message, way.where) {
						t.Errorf("%s of %s: message %q, want it to say %q", got.from, path, got.message, way.where)
					}
					for _, w := range way.want {
						if !strings.Contains(got.hint, w) {
							t.Errorf("%s of %s: hint %q lacks %q", got.from, path, got.hint, w)
						}
					}
					for _, w := range way.wantNot {
						if strings.Contains(strings.ToLower(got.message+" "+got.hint), w) {
							t.Errorf("%s of %s speaks of %q: %q %q", got.from, path, w, got.message, got.hint)
						}
					}
				}
			}
			if h.cfg.InContainer {
				if got := c.validatePath(missing).Hint; !strings.Contains(got, "- "+missing+":"+missing) {
					t.Errorf("the compose line for the folder: %q", got)
				}
			}
		})
	}
}
