// The session's explorer: the tree of the edit session with inline New
// file, New folder, Rename, Delete and Restore, on buttons and on keys (F2
// renames, Delete deletes after an inline confirmation, Enter commits,
// Escape cancels). No native dialogs: names are typed where the item will
// be, and the server's refusals (exists, bad_path, …) show beside them.
//
// Keyboard walking is static/tree.js's. Editor tabs follow through
// window.AtelierWorkbench when the page has one.
//
// A new folder stores nothing: git keeps no empty folders and the session
// keeps files, so it shows as pending ("kept when a file is added") until a
// file is made in it, and is gone on reload if none was.
//
// The open folders are remembered per session in this browser's storage,
// beside what the workbench (session.js) remembers, and opened again, in
// one reload of the tree, when the page loads.
(function () {
  "use strict";

  function start() {
    const pane = document.getElementById("session-tree");
    const section = document.getElementById("session");
    if (!pane || !section || !window.AtelierTree || pane.dataset.explorer) return;
    pane.dataset.explorer = "1";
    const tree = window.AtelierTree;
    const base = (section.dataset.base || "").replace(/\/+$/, "");
    const pending = new Set(); // folders made here that hold no file yet
    let editing = null; // the one inline editor or confirmation: { cancel }

    tree.setup(pane);

    // ---- small helpers ----------------------------------------------------

    const workbench = () => window.AtelierWorkbench || null;
    const dirOf = (p) => (p.includes("/") ? p.slice(0, p.lastIndexOf("/")) : "");
    const nameOf = (p) => p.slice(p.lastIndexOf("/") + 1);
    const join = (dir, name) => (dir ? dir + "/" + name : name);

    function csrf() {
      const meta = document.querySelector('meta[name="csrf-token"]');
      return meta ? meta.content : "";
    }

    // send asks the session's API; it answers { ok, status, body } with the
    // parsed JSON body ({ error, reason } when refused).
    async function send(method, segment, form, query) {
      let res;
      try {
        res = await fetch(atelierURL(base, [segment], query), {
          method,
          headers: { "Accept": "application/json", "X-CSRF-Token": csrf() },
          body: form ? new URLSearchParams(form) : undefined,
          credentials: "same-origin",
          cache: "no-store",
          redirect: "manual",
        });
      } catch (_) {
        return { ok: false, status: 0, body: { error: "The server could not be reached.", reason: "network" } };
      }
      let body = {};
      try { body = JSON.parse(await res.text()) || {}; } catch (_) { /* no body */ }
      if (!res.ok && !body.error) body = { error: "The request failed (" + res.status + ").", reason: "http_" + res.status };
      return { ok: res.ok, status: res.status, body };
    }

    // refresh reloads the tree (and the changes list) and resolves once the
    // new tree is in place.
    function refresh() {
      return new Promise((resolve) => {
        const done = () => {
          document.removeEventListener("htmx:after:settle", onSettle);
          clearTimeout(timer);
          showPending();
          resolve();
        };
        const onSettle = (event) => {
          if (event.target === pane || pane.contains(event.target)) done();
        };
        const timer = setTimeout(done, 5000);
        document.addEventListener("htmx:after:settle", onSettle);
        if (window.htmx && typeof window.htmx.trigger === "function") window.htmx.trigger(document.body, "refresh");
        else document.body.dispatchEvent(new CustomEvent("refresh", { bubbles: true }));
      });
    }

    // Every reload of the tree keeps open the folders that are open now.
    let alsoOpen = [];
    document.addEventListener("htmx:config:request", (event) => {
      const ctx = event.detail && event.detail.ctx;
      if (!ctx || ctx.sourceElement !== pane || !ctx.request) return;
      const open = new Set(alsoOpen);
      alsoOpen = [];
      pane.querySelectorAll("details[open] > summary[data-path]").forEach((s) => open.add(s.dataset.path));
      for (const p of pending) {
        for (let d = dirOf(p); d; d = dirOf(d)) open.add(d);
      }
      const url = new URL(ctx.request.action, location.href);
      url.searchParams.delete("open");
      for (const p of open) url.searchParams.append("open", p);
      ctx.request.action = url.pathname + url.search;
    });

    function current() {
      return pane.querySelector('[role="treeitem"][tabindex="0"]');
    }

    // folderFor is where a new item goes: into the selected folder, else
    // beside the selected file.
    function folderFor(item) {
      if (!item) return "";
      const kind = item.dataset.kind;
      if (kind === "dir" || kind === "pending") return item.dataset.path;
      return dirOf(item.dataset.path || "");
    }

    // listOf resolves to the <ul> that lists dir, unfolding it (and
    // loading it) first.
    async function listOf(dir) {
      if (!dir) return pane.querySelector("#session-files");
      const pend = pane.querySelector('li.pending[data-path="' + CSS.escape(dir) + '"] > ul');
      if (pend) return pend;
      const summary = pane.querySelector('summary[data-path="' + CSS.escape(dir) + '"]');
      if (!summary) return null;
      const details = summary.parentElement;
      const children = details.querySelector(":scope > .children");
      if (!details.open) summary.click();
      for (let i = 0; i < 100 && !children.querySelector(":scope > ul"); i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      return children.querySelector(":scope > ul");
    }

    function finish() {
      if (editing) editing.cancel();
      editing = null;
    }

    function showProblem(box, body) {
      box.hidden = false;
      box.dataset.reason = body.reason || "";
      box.textContent = (body.error || "Refused.") + " ";
      const code = document.createElement("code");
      code.textContent = body.reason || "";
      box.appendChild(code);
    }

    // inlineName puts an input in li for a name, under where ([words,
    // folder], see placeOf) when given. commit(name) resolves to null on
    // success or the refusal's body, shown beside the input.
    function inlineName(li, label, value, commit, onCancel, where) {
      finish();
      const box = document.createElement("span");
      box.className = "inline-edit";
      if (where) {
        const at = document.createElement("span");
        at.className = "inline-where";
        at.append(where[0]);
        if (where[1]) {
          const folder = document.createElement("code");
          folder.textContent = where[1];
          at.append(" ", folder);
        }
        box.append(at);
      }
      const input = document.createElement("input");
      input.type = "text";
      input.value = value || "";
      input.setAttribute("aria-label", label);
      input.autocomplete = "off";
      input.spellcheck = false;
      const problem = document.createElement("span");
      problem.className = "inline-error";
      problem.id = "explorer-problem";
      problem.setAttribute("role", "alert");
      problem.hidden = true;
      input.setAttribute("aria-describedby", problem.id);
      box.append(input, problem);
      // Where the name was: before a folder's own box, after a file's link
      // (both hidden while the name is edited).
      const folder = li.querySelector(":scope > details");
      if (folder) li.insertBefore(box, folder);
      else li.appendChild(box);
      li.classList.add("editing");
      let busy = false;
      const cancel = () => {
        box.remove();
        li.classList.remove("editing");
        if (onCancel) onCancel();
      };
      editing = { cancel };
      input.addEventListener("keydown", async (event) => {
        event.stopPropagation(); // the tree's keys are not for the input
        if (event.key === "Escape") {
          event.preventDefault();
          finish();
        } else if (event.key === "Enter") {
          event.preventDefault();
          if (busy) return;
          const name = input.value.trim();
          if (!name) {
            showProblem(problem, { error: "Type a name.", reason: "empty" });
            return;
          }
          busy = true;
          input.setAttribute("aria-busy", "true");
          const refused = await commit(name);
          busy = false;
          input.removeAttribute("aria-busy");
          if (refused) {
            input.setAttribute("aria-invalid", "true");
            showProblem(problem, refused);
            input.focus();
          }
        }
      });
      input.focus();
      const dot = input.value.lastIndexOf(".");
      input.setSelectionRange(0, dot > 0 ? dot : input.value.length);
      return { box, input };
    }

    // newRow is an empty row of list where a new item is typed: a folder at
    // the top, a file after the folders.
    function newRow(list, folder) {
      const li = document.createElement("li");
      li.className = "new-item";
      li.setAttribute("role", "none");
      const dirs = list.querySelectorAll(":scope > li.dir");
      const after = folder ? null : dirs[dirs.length - 1];
      if (after) after.after(li);
      else list.prepend(li);
      const empty = list.querySelector(":scope > li.empty");
      if (empty) empty.hidden = true;
      return li;
    }

    // focusCurrent puts the focus back on the tree's Tab stop.
    function focusCurrent() {
      const item = current() || pane.querySelector('[role="treeitem"]');
      if (item) tree.focusItem(pane, item);
    }

    async function focusPath(path) {
      const item = tree.findItem(pane, path);
      if (item) tree.focusItem(pane, item);
      return item;
    }

    // ---- the open folders, remembered ---------------------------------------

    const memoryKey = "atelier.session." + (section.dataset.session || "") + ".tree";
    let remembering = false; // until the remembered folders are open again

    function openFolders() {
      return Array.from(pane.querySelectorAll("details[open] > summary[data-path]"), (s) => s.dataset.path);
    }

    function rememberFolders() {
      if (!remembering) return;
      try {
        localStorage.setItem(memoryKey, JSON.stringify({ at: Date.now(), open: openFolders() }));
      } catch (_) {
        // private mode or full: the folders simply are not remembered
      }
    }

    function rememberedFolders() {
      try {
        const m = JSON.parse(localStorage.getItem(memoryKey) || "null");
        return m && Array.isArray(m.open) ? m.open.filter((p) => typeof p === "string" && p).slice(0, 64) : [];
      } catch (_) {
        return [];
      }
    }

    // reopenFolders reloads the tree once with the remembered folders open
    // too (the server lists them in the same answer; those that are gone
    // are simply not there).
    function reopenFolders() {
      const open = new Set(openFolders());
      const wanted = rememberedFolders().filter((p) => !open.has(p));
      const done = () => { remembering = true; rememberFolders(); };
      if (!wanted.length || !window.htmx || typeof window.htmx.ajax !== "function") {
        done();
        return;
      }
      alsoOpen.push(...wanted);
      Promise.resolve(window.htmx.ajax("GET", pane.getAttribute("hx-get"), { source: pane, target: pane, swap: "innerHTML" }))
        .catch(() => {}).then(done);
    }

    // ---- the actions --------------------------------------------------------

    // placeOf tells where a new item of dir goes, as the row above its
    // name shows it: the folder is the one selected in the tree, which the
    // person may not have in mind.
    function placeOf(kind, dir) {
      return dir ? [kind + " in", dir + "/"] : [kind + " in the top folder", ""];
    }

    async function newFile(dir) {
      const list = await listOf(dir);
      if (!list) return;
      const li = newRow(list, false);
      inlineName(li, "Name of the new file in " + (dir || "the top folder"), "", async (name) => {
        const path = join(dir, name);
        const res = await send("POST", "new-file", { path });
        if (!res.ok) return res.body;
        editing = null;
        for (const p of Array.from(pending)) if (path.startsWith(p + "/")) pending.delete(p);
        for (let d = dirOf(path); d; d = dirOf(d)) alsoOpen.push(d);
        await refresh();
        // A workbench opens the new file in a tab and puts the person in
        // its editor, with the file selected in the tree for Shift+Tab
        // back; without one the file is selected and Enter opens it.
        const wb = workbench();
        const item = tree.findItem(pane, path);
        if (wb) {
          if (item) tree.focusItem(pane, item, true);
          await wb.open(path);
        } else if (item) {
          tree.focusItem(pane, item);
        }
        return null;
      }, () => { li.remove(); showEmpty(list); focusCurrent(); }, placeOf("New file", dir));
    }

    async function newFolder(dir) {
      const list = await listOf(dir);
      if (!list) return;
      const li = newRow(list, true);
      inlineName(li, "Name of the new folder in " + (dir || "the top folder"), "", async (name) => {
        const path = join(dir, name);
        const res = await send("POST", "new-folder", { path });
        if (!res.ok) return res.body;
        editing = null;
        li.remove();
        pending.add(path);
        showPending();
        newFile(path); // the folder is kept once it holds a file
        return null;
      }, () => { li.remove(); showEmpty(list); focusCurrent(); }, placeOf("New folder", dir));
    }

    function rename(item) {
      const from = item.dataset.path;
      const li = item.closest("li");
      if (item.dataset.kind === "pending") return;
      const wb = workbench();
      const wasOpen = item.matches("summary") && item.parentElement.open;
      const wasCurrent = item.getAttribute("aria-current") === "true";
      inlineName(li, "New name of " + from, nameOf(from), async (name) => {
        const to = name.includes("/") ? name : join(dirOf(from), name);
        const res = await send("POST", "rename", { from, to });
        if (!res.ok) return res.body;
        editing = null;
        if (wb) for (const m of res.body.moved || []) wb.renamed(m.from, m.to);
        if (wasOpen) alsoOpen.push(to);
        for (let d = dirOf(to); d; d = dirOf(d)) alsoOpen.push(d);
        await refresh();
        const moved = await focusPath(to);
        if (!wb && wasCurrent && moved && moved.matches("a.open-file")) moved.click();
        return null;
      }, () => { tree.focusItem(pane, item); });
    }

    // confirmInline asks in item's row; act() resolves to null when done
    // or to the refusal's body, shown in place.
    function confirmInline(item, text, label, act) {
      finish();
      // Opened by a key, the answer waits for that key's release: the
      // Enter that asked must not also answer.
      let armed = !keyDown;
      if (!armed) document.addEventListener("keyup", () => { armed = true; }, { once: true, capture: true });
      const li = item.closest("li");
      const box = document.createElement("span");
      box.className = "inline-confirm";
      box.setAttribute("role", "group");
      box.setAttribute("aria-label", "Confirm: " + label);
      const question = document.createElement("span");
      question.textContent = text;
      const yes = document.createElement("button");
      yes.type = "button";
      yes.className = label === "Delete" ? "danger" : "";
      yes.dataset.confirm = "yes";
      yes.textContent = label;
      const no = document.createElement("button");
      no.type = "button";
      no.className = "secondary";
      no.textContent = "Cancel";
      const problem = document.createElement("span");
      problem.className = "inline-error";
      problem.setAttribute("role", "alert");
      problem.hidden = true;
      box.append(question, " ", yes, " ", no, problem);
      li.appendChild(box);
      li.classList.add("confirming");
      editing = {
        cancel: () => {
          box.remove();
          li.classList.remove("confirming");
        },
      };
      const back = () => { finish(); tree.focusItem(pane, item); };
      no.addEventListener("click", back);
      box.addEventListener("keydown", (event) => {
        event.stopPropagation(); // the tree's keys are not for the buttons
        if (event.key === "Escape") {
          event.preventDefault();
          back();
        }
      });
      yes.addEventListener("click", async () => {
        if (!armed) return;
        yes.disabled = true;
        const refused = await act();
        yes.disabled = false;
        if (refused) {
          showProblem(problem, refused);
          yes.focus();
        }
      });
      yes.focus();
    }

    // confirmRestore brings back a deleted file, or the base's text of a
    // modified one.
    function confirmRestore(item) {
      const path = item.dataset.path;
      const deleted = item.dataset.status === "deleted";
      const wb = workbench();
      const text = deleted ? "Restore " + nameOf(path) + " as it is in the base?"
        : "Revert " + nameOf(path) + " to the base? Your saved changes to it are lost" +
          (wb && wb.isDirty(path) ? ", and the unsaved ones in its tab." : ".");
      confirmInline(item, text, deleted ? "Restore" : "Revert", async () => {
        const res = await send("POST", "revert", { path });
        if (!res.ok) return res.body;
        editing = null;
        if (wb && !deleted) await wb.reverted(path); // an open tab shows the base's text again
        await refresh();
        focusPath(path);
        return null;
      });
    }

    function confirmDelete(item) {
      const path = item.dataset.path;
      const kind = item.dataset.kind;
      const li = item.closest("li");
      if (item.dataset.status === "deleted") return;
      if (kind === "pending") {
        pending.delete(path);
        li.remove();
        focusCurrent();
        return;
      }
      const wb = workbench();
      const text = (kind === "dir" ? "Delete the folder " + nameOf(path) + " and its files?" : "Delete " + nameOf(path) + "?") +
        (wb && kind !== "dir" && wb.isDirty(path) ? " Its unsaved changes are lost." : "");
      confirmInline(item, text, "Delete", async () => {
        const res = kind === "dir"
          ? await send("POST", "delete-folder", { path })
          : await send("DELETE", "file", null, { path });
        if (!res.ok) return res.body;
        editing = null;
        const gone = kind === "dir" ? (res.body.deleted || []) : [path];
        if (wb) for (const p of gone) wb.deleted(p);
        await refresh();
        if (!(await focusPath(path))) {
          const parent = tree.findItem(pane, dirOf(path));
          if (parent) tree.focusItem(pane, parent);
          else focusCurrent();
        }
        return null;
      });
    }

    // showPending draws the pending folders into the tree where their
    // parent is shown, and forgets those a file has made real.
    function showPending() {
      for (const path of Array.from(pending).sort()) {
        if (pane.querySelector('summary[data-path="' + CSS.escape(path) + '"]')) {
          pending.delete(path);
          continue;
        }
        if (pane.querySelector('li.pending[data-path="' + CSS.escape(path) + '"]')) continue;
        const dir = dirOf(path);
        const list = dir ? pane.querySelector('summary[data-path="' + CSS.escape(dir) + '"] ~ .children > ul, li.pending[data-path="' + CSS.escape(dir) + '"] > ul')
          : pane.querySelector("#session-files");
        if (!list) continue;
        const li = document.createElement("li");
        li.className = "dir pending";
        li.setAttribute("role", "none");
        li.dataset.path = path;
        const label = document.createElement("span");
        label.setAttribute("role", "treeitem");
        label.tabIndex = -1;
        label.dataset.path = path;
        label.dataset.kind = "pending";
        label.setAttribute("aria-label", nameOf(path) + ", empty folder, kept when a file is added");
        label.innerHTML = '<svg class="icon" aria-hidden="true"><use href="/static/icons.svg#folder"></use></svg>';
        const name = document.createElement("span");
        name.className = "name";
        name.textContent = nameOf(path);
        const note = document.createElement("span");
        note.className = "muted pending-note";
        note.textContent = " empty — kept when a file is added";
        label.append(name, note);
        const group = document.createElement("ul");
        group.className = "tree";
        group.setAttribute("role", "group");
        li.append(label, group);
        list.prepend(li);
        showEmpty(list);
      }
    }

    function showEmpty(list) {
      const empty = list && list.querySelector(":scope > li.empty");
      if (empty) empty.hidden = list.querySelectorAll(":scope > li:not(.empty)").length > 0;
    }

    // ---- wiring ---------------------------------------------------------------

    pane.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-act]");
      if (!button || !pane.contains(button)) return;
      event.preventDefault();
      const row = button.closest("li[data-path]");
      const item = row ? row.querySelector('[role="treeitem"]') : null;
      switch (button.dataset.act) {
        case "new-file": newFile(folderFor(current())); break;
        case "new-folder": newFolder(folderFor(current())); break;
        case "rename": if (item) rename(item); break;
        case "delete": if (item) confirmDelete(item); break;
        case "restore": if (item) confirmRestore(item); break;
      }
    });

    // Any reload of the tree (a save, a command) keeps the pending folders.
    document.addEventListener("htmx:after:settle", (event) => {
      if (event.target === pane || pane.contains(event.target)) {
        showPending();
        rememberFolders();
      }
    });
    // details' toggle does not bubble: listen while it travels down.
    pane.addEventListener("toggle", rememberFolders, true);
    window.addEventListener("pagehide", rememberFolders);
    reopenFolders();

    // keyDown is true while a key that may open a confirmation is held.
    let keyDown = false;
    document.addEventListener("keydown", () => { keyDown = true; }, true);
    document.addEventListener("keyup", () => { keyDown = false; }, true);
    document.addEventListener("pointerdown", () => { keyDown = false; }, true);

    pane.addEventListener("keydown", (event) => {
      const item = event.target.closest && event.target.closest('[role="treeitem"]');
      if (!item || event.altKey || event.ctrlKey || event.metaKey) return;
      if (event.key === "Enter" && item.dataset.status === "deleted") {
        event.preventDefault();
        confirmRestore(item);
      } else if (event.key === "F2") {
        event.preventDefault();
        rename(item);
      } else if (event.key === "Delete") {
        event.preventDefault();
        confirmDelete(item);
      }
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
