package server

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"atelier/editsession"
)

// changesOf is the session's changes, path → status.
func changesOf(t *testing.T, c *client, base string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, ch := range decode[[]editsession.Change](t, c.get(base+"/changes", jsonAccept)) {
		got[ch.Path] = ch.Status
	}
	return got
}

// mustRun runs command in the session and fails unless it exits 0.
func (c *client) mustRun(base, command string) commandJSON {
	c.h.t.Helper()
	out, res := c.run(base, command, "")
	if res.StatusCode != http.StatusOK || out.ExitCode != 0 {
		c.h.t.Fatalf("%s: %d %+v", command, res.StatusCode, out)
	}
	return out
}

// TestCaptureOfALargeCheckoutIsExact: in an 11,000-file checkout, whose
// capture looks only at what a command changed, a command that writes,
// deletes, chmods, renames files and folders, replaces a folder and makes
// a symbolic link is captured exactly; one that touches nothing captures
// nothing, also after the changes.
func TestCaptureOfALargeCheckoutIsExact(t *testing.T) {
	needRoot(t)
	captureOfALargeCheckoutIsExact(t, newHarness(t))
}

func TestCaptureOfALargeCheckoutIsExactInAPod(t *testing.T) {
	needRoot(t)
	captureOfALargeCheckoutIsExact(t, newHarness(t, onKube(t)))
}

func captureOfALargeCheckoutIsExact(t *testing.T, h *harness) {
	owner := h.user("owner", false)
	id := owner.createProject("large")
	var files []entry
	for d := range 110 {
		for f := range 100 {
			files = append(files, entry{name: fmt.Sprintf("d%03d/f%02d.txt", d, f), body: fmt.Sprintf("%d/%d\n", d, f)})
		}
	}
	files = append(files, entry{name: "keep/a.txt", body: "a\n"}, entry{name: "keep/b.txt", body: "b\n"},
		entry{name: "gone/x.txt", body: "x\n"}, entry{name: "gone/sub/y.txt", body: "y\n"},
		entry{name: "mv/one.txt", body: "one\n"})
	if res := owner.upload(id, "large.tar.gz", tarGz(t, files), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)

	if out := owner.mustRun(base, "true"); len(out.Notes) != 0 {
		t.Fatalf("notes of a command that touched nothing: %q", out.Notes)
	}
	if got := changesOf(t, owner, base); len(got) != 0 {
		t.Fatalf("a command that touched nothing changed %v", got)
	}

	out := owner.mustRun(base, `echo changed > d000/f00.txt
echo new > d001/new.txt
rm d002/f05.txt
rm -r gone
chmod +x keep/a.txt
mv mv mv2
mv d003/f01.txt d003/renamed.txt
ln -s ../keep/b.txt d004/link
rm -r d005 && mkdir d005 && echo only > d005/only.txt
echo tmp > d006/tmp.txt && rm d006/tmp.txt`)
	want := map[string]string{
		"d000/f00.txt": "modified", "d001/new.txt": "added", "d002/f05.txt": "deleted",
		"gone/x.txt": "deleted", "gone/sub/y.txt": "deleted",
		"mv/one.txt": "deleted", "mv2/one.txt": "added",
		"d003/f01.txt": "deleted", "d003/renamed.txt": "added",
		"d005/only.txt": "added",
	}
	for f := range 100 {
		want[fmt.Sprintf("d005/f%02d.txt", f)] = "deleted"
	}
	if got := changesOf(t, owner, base); !maps.Equal(got, want) {
		t.Fatalf("changes:\n got %v\nwant %v", got, want)
	}
	if len(out.Notes) != 1 || !strings.Contains(out.Notes[0], "d004/link") {
		t.Fatalf("notes %q, want the link's alone", out.Notes)
	}
	if got, _, _ := owner.read(base, "d000/f00.txt"); got != "changed\n" {
		t.Fatalf("captured d000/f00.txt %q", got)
	}

	// Nothing touched again: the same changes, the same note.
	out = owner.mustRun(base, "cat d000/f00.txt mv2/one.txt >/dev/null")
	if got := changesOf(t, owner, base); !maps.Equal(got, want) {
		t.Fatalf("changes after a command that touched nothing:\n got %v\nwant %v", got, want)
	}
	if len(out.Notes) != 1 || !strings.Contains(out.Notes[0], "d004/link") {
		t.Fatalf("notes %q, want the link's alone", out.Notes)
	}

	// Put back as the base has it: no change is left.
	owner.mustRun(base, `echo 0/0 > d000/f00.txt && rm d001/new.txt d004/link && mv mv2 mv && mv d003/renamed.txt d003/f01.txt
printf '2/5\n' > d002/f05.txt && mkdir -p gone/sub && echo x > gone/x.txt && echo y > gone/sub/y.txt
rm -r d005 && mkdir d005 && for f in $(seq -w 0 99); do echo "5/$((10#$f))" > d005/f$f.txt; done`)
	if got := changesOf(t, owner, base); len(got) != 0 {
		t.Fatalf("changes after putting the base back: %v", got)
	}
}

// TestCaptureFromTheAttackersSide: links pointing out of the checkout,
// relative or absolute, a file swapped for such a link by a shell of the
// session while a command's capture runs, and hard links to files outside
// never bring a byte from outside into the session's edits.
func TestCaptureFromTheAttackersSide(t *testing.T) {
	needRoot(t)
	captureFromTheAttackersSide(t, newHarness(t))
}

func TestCaptureFromTheAttackersSideInAPod(t *testing.T) {
	needRoot(t)
	captureFromTheAttackersSide(t, newHarness(t, onKube(t)))
}

func captureFromTheAttackersSide(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	secret := "host-secret-" + s.ID
	outside := filepath.Join(h.cfg.DataDir, "secret.txt")
	if err := os.WriteFile(outside, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	owner.mustRun(base, "true") // the checkout is built
	checkout := hostCheckout(t, h, s.ID)
	rel, err := filepath.Rel(checkout, outside)
	if err != nil {
		t.Fatal(err)
	}

	out := owner.mustRun(base, fmt.Sprintf(`ln -s %s abs-link
ln -s %s rel-link
ln -s /etc/passwd src/passwd
ln /etc/hostname hard-etc 2>/dev/null; ln ~/.profile hard-home 2>/dev/null
echo mine > /tmp/mine && ln /tmp/mine hard-tmp 2>/dev/null
true`, outside, rel))
	notes := strings.Join(out.Notes, "\n")
	for _, link := range []string{"abs-link", "rel-link", "src/passwd"} {
		if !strings.Contains(notes, link+": left out, a symbolic link is not an edit") {
			t.Errorf("no note for %s: %q", link, out.Notes)
		}
	}
	assertNoSecret := func() {
		t.Helper()
		for p := range changesOf(t, owner, base) {
			got, _, _ := owner.read(base, p)
			if strings.Contains(got, secret) || strings.Contains(got, "root:") {
				t.Fatalf("%s holds a file from outside the checkout: %q", p, got)
			}
		}
	}
	assertNoSecret()

	// A shell of the session swaps a file for a link to the outside and
	// back, over and over, while commands are captured.
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	swap := fmt.Sprintf("cd %s; while :; do echo plain > s.new; mv -f s.new swap.txt; ln -sfn %s swap.txt; ln -sfn %s swap.txt; done &\n", h.workspace(), outside, rel)
	if res := owner.input(base, term.ID, term.NextSeq, swap); res.StatusCode >= 300 {
		t.Fatalf("input: %d %s", res.StatusCode, readBody(res))
	}
	for range 15 {
		owner.mustRun(base, "true")
		assertNoSecret()
	}
	if got, _, _ := owner.read(base, "swap.txt"); got != "" && got != "plain\n" {
		t.Fatalf("swap.txt captured as %q", got)
	}
	keys := slices.Collect(maps.Keys(changesOf(t, owner, base)))
	for _, k := range keys {
		if strings.HasPrefix(k, "hard-") && k != "hard-tmp" {
			t.Errorf("a hard link to a file that is not the session's became the edit %s", k)
		}
	}
}
