package server

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// tabUntil presses Tab until the JavaScript predicate holds of the focus.
func tabUntil(predicate string, shift bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		var opts []chromedp.KeyOption
		if shift {
			opts = append(opts, chromedp.KeyModifiers(chromedp.ModifierShift))
		}
		for range 40 {
			if _, err := chromedp.KeyEvent(kb.Tab, opts...)(ctx, t); err != nil {
				return err
			}
			ok, err := chromedp.Evaluate[bool](predicate)(ctx, t)
			if err != nil || ok {
				return err
			}
		}
		return context.DeadlineExceeded
	})
}

// With the keyboard alone a person walks the session's tree, makes a file
// inline (it opens in a tab, in whose editor they type), renames it inline
// (the tab follows, its unsaved text kept), deletes it (the tab closes) and
// a base file inline (seeing the change marks), sees a bad name refused in
// place, restores the base file, reverts it after a change (its open tab
// shows the base's text again), makes a folder (pending until its first
// file) and opens a file into the editor.
func TestBrowserExplorer(t *testing.T) {
	h := newHarness(t)
	owner, id := browsable(t, h)
	_, base := owner.session(id)
	ctx := browser(t)
	const inTree = `!!document.activeElement.closest('#session-tree [role="tree"]')`
	const onNewFile = `document.activeElement.matches('#session-tree [data-act="new-file"]')`
	// inEditorOf holds when the focus is in the shown editor and its tab is path's.
	inEditorOf := func(path string) chromedp.Action[chromedp.Void] {
		return untilPage(`document.activeElement.id === "editor" && document.querySelector('#editor-tabs .editor-tab.current')?.dataset.path === ` + jsString(path))
	}
	const editorText = `document.querySelector("#editor").shadowRoot.querySelector(".cm-content").textContent`
	err := do(ctx,
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		shows(`#session-tree summary[data-path="cmd"]`),
		tabUntil(inTree, false),
		focusedOn("cmd"),
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("internal"),
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("README.md"),
		chromedp.KeyEvent(kb.Enter),
		inEditorOf("README.md"),
		chromedp.KeyEvent(kb.Escape),
		tabUntil(inTree, true),
		focusedOn("README.md"),

		// New file, from the toolbar just before the tree.
		tabUntil(onNewFile, true),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree li.new-item .inline-edit input`),
		chromedp.KeyEvent("notes.txt"),
		chromedp.KeyEvent(kb.Enter),
		// The new file opens in a tab and the person types in it; Escape
		// then Shift+Tab goes back to it in the tree.
		inEditorOf("notes.txt"),
		chromedp.KeyEvent("draft"),
		shows(`#editor-tabs .editor-tab[data-path="notes.txt"][data-dirty="true"]`),
		chromedp.KeyEvent(kb.Escape), // then Tab leaves the editor instead of indenting
		tabUntil(inTree, true),
		focusedOn("notes.txt"),
		showsText(`#session-tree li.added[data-path="notes.txt"] .mark`, "A"),

		// F2 renames in place: the name is selected up to its extension.
		chromedp.KeyEvent(kb.F2),
		shows(`#session-tree li[data-path="notes.txt"] .inline-edit input`),
		chromedp.KeyEvent("todo"),
		chromedp.KeyEvent(kb.Enter),
		focusedOn("todo.txt"),
		shows(`#session-tree li.added[data-path="todo.txt"]`),
		untilPage(`!document.querySelector('#session-tree [data-path="notes.txt"]')`),
		// Its tab follows the new name and keeps the unsaved text.
		shows(`#editor-tabs .editor-tab[data-path="todo.txt"][data-dirty="true"]`),
		untilPage(`!document.querySelector('#editor-tabs .editor-tab[data-path="notes.txt"]') && `+editorText+`.includes("draft")`),
		focusedOn("todo.txt"),

		// Delete asks inline; Escape keeps the file, Enter on Delete removes it.
		chromedp.KeyEvent(kb.Delete),
		shows(`#session-tree li[data-path="todo.txt"] .inline-confirm`),
		chromedp.KeyEvent(kb.Escape),
		focusedOn("todo.txt"),
		untilPage(`!document.querySelector('#session-tree .inline-confirm')`),
		chromedp.KeyEvent(kb.Delete),
		untilPage(`document.activeElement.matches('#session-tree .inline-confirm button.danger')`),
		showsText(`#session-tree li[data-path="todo.txt"] .inline-confirm`, "unsaved changes are lost"),
		untilPage(`window.leftTree = false, document.addEventListener("focusin", (e) => { if (!e.target.closest("#session-tree")) window.leftTree = true; }), true`),
		chromedp.KeyEvent(kb.Enter),
		untilPage(`!document.querySelector('#session-tree [data-path="todo.txt"]')`),
		// Its tab closes with it, the other stays, and the focus stays in
		// the tree.
		untilPage(`!document.querySelector('#editor-tabs .editor-tab[data-path="todo.txt"]') && !!document.querySelector('#editor-tabs .editor-tab[data-path="README.md"]')`),
		untilPage(inTree),
		untilPage(`window.leftTree === false`),

		// A base file deleted stays listed, struck through, to be restored.
		untilPage(inTree),
		chromedp.KeyEvent(kb.End), focusedOn("README.md"),
		chromedp.KeyEvent(kb.Delete),
		untilPage(`document.activeElement.matches('#session-tree .inline-confirm button.danger')`),
		chromedp.KeyEvent(kb.Enter),
		focusedOn("README.md"),
		showsText(`#session-tree li.deleted[data-path="README.md"] .mark`, "D"),
		untilPage(`!document.querySelector('#editor-tabs .editor-tab')`),
		untilPage(`getComputedStyle(document.querySelector('#session-tree li.deleted[data-path="README.md"] .deleted-file')).textDecorationLine === "line-through"`),
		showsText(`#changes`, "README.md"),
		// Enter on a deleted file offers to restore it; Escape declines.
		chromedp.KeyEvent(kb.Enter),
		untilPage(`document.activeElement.matches('#session-tree li[data-path="README.md"] .inline-confirm button[data-confirm]')`),
		chromedp.KeyEvent(kb.Escape),
		focusedOn("README.md"),

		// A bad name is refused in place with the server's reason, and
		// the input stays for a better one.
		tabUntil(onNewFile, true),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree li.new-item .inline-edit input`),
		chromedp.KeyEvent("../escape.txt"),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree .inline-error[data-reason="bad_path"]`),
		untilPage(`document.activeElement.matches('#session-tree li.new-item input[aria-invalid="true"]')`),
		chromedp.KeyEvent(kb.Escape),
		untilPage(`!document.querySelector('#session-tree li.new-item')`),
		untilPage(inTree),

		// This time Enter restores it.
		focusedOn("README.md"),
		chromedp.KeyEvent(kb.Enter),
		untilPage(`document.activeElement.matches('#session-tree li[data-path="README.md"] .inline-confirm button[data-confirm]')`),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree li.file:not(.deleted) > a[data-path="README.md"]`),
		focusedOn("README.md"),

		// A saved change, then an unsaved one; Revert brings back the
		// base's text into the open tab, which stays open and clean.
		chromedp.KeyEvent(kb.Enter),
		inEditorOf("README.md"),
		chromedp.KeyEvent("saved "),
		chromedp.KeyEvent("s", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		showsText(`#session-tree li.modified[data-path="README.md"] .mark`, "M"),
		chromedp.KeyEvent("unsaved "),
		shows(`#editor-tabs .editor-tab[data-path="README.md"][data-dirty="true"]`),
		untilPage(`document.querySelector('#session-tree li[data-path="README.md"] button[data-act="restore"]').click(), true`),
		showsText(`#session-tree li[data-path="README.md"] .inline-confirm`, "unsaved ones in its tab"),
		untilPage(`document.activeElement.matches('#session-tree li[data-path="README.md"] .inline-confirm button[data-confirm]')`),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree li.file:not(.modified) > a[data-path="README.md"]`),
		untilPage(editorText+` === "# Browse" && !!document.querySelector('#editor-tabs .editor-tab.current[data-path="README.md"]:not([data-dirty="true"])')`),
		focusedOn("README.md"),

		// Walk down into a folder; a new folder there is pending until its
		// first file, typed inside it, makes it real.
		chromedp.KeyEvent(kb.Home), focusedOn("cmd"),
		chromedp.KeyEvent(kb.ArrowRight), shows(`#session-tree summary[data-path="cmd/tool"]`),
		chromedp.KeyEvent(kb.ArrowRight), focusedOn("cmd/tool"),
		chromedp.KeyEvent(kb.ArrowRight), shows(`#session-tree a[data-path="cmd/tool/main.go"]`),
		tabUntil(`document.activeElement.matches('#session-tree [data-act="new-folder"]')`, true),
		chromedp.KeyEvent(kb.Enter),
		shows(`#session-tree li.new-item .inline-edit input`),
		chromedp.KeyEvent("docs"),
		chromedp.KeyEvent(kb.Enter),
		showsText(`#session-tree li.pending[data-path="cmd/tool/docs"]`, "kept when a file is added"),
		untilPage(`document.activeElement.matches('#session-tree li.pending[data-path="cmd/tool/docs"] li.new-item input')`),
		chromedp.KeyEvent("a.md"),
		chromedp.KeyEvent(kb.Enter),
		inEditorOf("cmd/tool/docs/a.md"),
		untilPage(`!document.querySelector('#session-tree li.pending') && !!document.querySelector('#session-tree summary[data-path="cmd/tool/docs"]')`),
		chromedp.KeyEvent(kb.Escape), // then Tab leaves the editor instead of indenting
		tabUntil(inTree, true),
		focusedOn("cmd/tool/docs/a.md"),

		// And Enter opens a file in a tab, with the focus in its editor.
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("cmd/tool/flags.go"),
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("cmd/tool/main.go"),
		chromedp.KeyEvent(kb.Enter),
		inEditorOf("cmd/tool/main.go"),
		shows(`#session-tree a[data-path="cmd/tool/main.go"][aria-current="true"]`),
		untilPage(editorText+`.includes("package main")`),
		chromedp.KeyEvent(kb.Escape), // then Tab leaves the editor instead of indenting
		tabUntil(inTree, true),
		focusedOn("cmd/tool/main.go"),
	)
	if err != nil {
		t.Fatalf("explorer: %v; the page has %s", err, explorerState(ctx))
	}
	if _, _, status := owner.read(base, "todo.txt"); status != 404 {
		t.Fatalf("todo.txt after its deletion: %d", status)
	}
	if body, _, status := owner.read(base, "README.md"); status != 200 || body != "# Browse\n" {
		t.Fatalf("README.md after its restoration: %d %q", status, body)
	}
	if body, _, status := owner.read(base, "cmd/tool/docs/a.md"); status != 200 || body != "" {
		t.Fatalf("the file made in a new folder: %d %q", status, body)
	}
}

// explorerState describes the focus and the tree for a failure message.
func explorerState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`JSON.stringify({url: location.href, focus: document.activeElement?.outerHTML.slice(0, 300), tree: document.querySelector("#session-tree")?.innerHTML.slice(0, 3000)})`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return state
}
