package code_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"atelier/code"
	"atelier/testrig/txwatchtest"
)

// TestImportCallsNoGitInsideATransaction: an import writes its tree and
// commits it onto canonical, under the repository's lock, before the
// transaction that records the commit; that transaction holds SQL alone.
// The watch (txwatch) names any git, object store or sandbox call made
// while a transaction of the request is open.
func TestImportCallsNoGitInsideATransaction(t *testing.T) {
	e := newEnv(t)
	ctx, w := txwatchtest.Attach(context.Background())
	adm, err := e.code.Admit(ctx, e.acc)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Release()
	archive := tarGz(t, []member{{name: "readme.md", body: "# Imported\n"}})
	done, err := e.code.Import(ctx, adm, code.ImportInput{Archive: bytes.NewReader(archive), Size: int64(len(archive)), Filename: "app.tar.gz"})
	if err != nil {
		t.Fatal(err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the import called %q inside a transaction", in)
	}
	if !slices.Contains(w.Seen(), "git commit-tree") {
		t.Errorf("the import made no commit: %q", w.Seen())
	}
	if got := e.git(t, "rev-parse", "refs/heads/main"); got != done.Commit {
		t.Fatalf("main at %s, the import answered %s", got, done.Commit)
	}
}
