// The edit session's workbench: files open as editor tabs (CodeMirror,
// static/vendor/codemirror.min.js, window.AtelierEditor), saved through the
// session's file API; a bottom panel with the terminals (terminal.js), the
// command box and the changes; dividers that resize the panes and are
// remembered per browser; quick open and the keyboard shortcuts; and the
// warning before the session times out for lack of activity.
//
// The workbench remembers, per session and in this browser's storage, its
// open tabs with the cursor and scroll of each, the tab shown and the
// panel's tab, and puts them back when the page loads again (the
// explorer, explorer.js, keeps the tree's open folders beside them). A
// remembered file that is gone is dropped with a note.
//
// The page provides:
//   <section id="session" data-project data-session data-base data-idle-ms
//            data-idle-deadline data-server-now data-open-path>
//   #workbench with #session-tree, #split-explorer, #split-panel, #panel
//   a.open-file[data-path] links in the tree (swapped by htmx at any time)
//   #editor-tabs #editors #editor-empty #editor-path #editor-status #save
//   #diff-view with #diff (where the changes list's links load a file's
//     diff), #diff-back and #diff-edit
//   panel tabs [role=tab][data-panel] for #panel-terminals, #panel-command,
//     #panel-changes; #panel-toggle
//   #command-form #command-run #command-cancel #command-state #command-result
//     (#command-form's data-running and data-running-since name a command
//     of the session that runs as the page is rendered; the page follows
//     its output stream, {base}/commands/current/stream)
//   buttons [data-confirm] with their inline questions (Discard, Rebase)
//   dialogs #finder (#find-query, #find-box) and #shortcuts
//   #idle-warning (hidden) with #idle-countdown and #keep-working
//   <meta name="csrf-token">
//
// For the explorer (explorer.js) it defines window.AtelierWorkbench:
//   open(path)            open path in a tab, or show its tab
//   closeTab(path)        close its tab; a tab with unsaved changes asks
//                         inline first (answers false then)
//   renamed(from, to)     a file or folder was renamed: its tabs follow
//   deleted(path)         a file or folder was deleted: its tabs close
//   reverted(path)        a file went back to the base: its open tab
//                         reloads, unsaved changes dropped
//   isDirty(path)         whether path's tab has unsaved changes
(function () {
  "use strict";

  // Sizes of the panes, in CSS pixels, and where they are kept.
  const EXPLORER_KEY = "atelier.workbench.explorerWidth";
  const PANEL_KEY = "atelier.workbench.panelHeight";
  const PANEL_HIDDEN_KEY = "atelier.workbench.panelHidden";
  const MIN_EXPLORER = 140;
  const MIN_EDITORS = 240;
  const MIN_PANEL = 90;
  const MIN_EDITOR_ROWS = 120;
  const KEY_STEP = 24;
  // What a session's workbench remembers is kept under MEMORY + its id
  // (explorer.js adds ".tree"), for the last KEEP_SESSIONS sessions.
  const MEMORY = "atelier.session.";
  const KEEP_SESSIONS = 20;
  const MAX_REMEMBERED_TABS = 30;

  // The sizes this browser last chose go on <html> at once: this script is
  // loaded without defer, so the panes are drawn at their size the first
  // time (app.css reads --explorer-width, --panel-height, wb-sized and
  // wb-panel-hidden).
  const root = document.documentElement;
  (function applyStoredSizes() {
    let w = 0, h = 0, hidden = false;
    try {
      w = Number(localStorage.getItem(EXPLORER_KEY)) || 0;
      h = Number(localStorage.getItem(PANEL_KEY)) || 0;
      hidden = !!localStorage.getItem(PANEL_HIDDEN_KEY);
    } catch (_) {
      return;
    }
    if (w > 0) root.style.setProperty("--explorer-width", w + "px");
    if (h > 0) {
      root.style.setProperty("--panel-height", h + "px");
      root.classList.add("wb-sized");
    }
    if (hidden) root.classList.add("wb-panel-hidden");
  })();

  function start() {
    const section = document.getElementById("session");
    if (!section || section.dataset.started) return;
    section.dataset.started = "1";

    const $ = (id) => document.getElementById(id);
    const bench = $("workbench");
    const tabsEl = $("editor-tabs");
    const editorsEl = $("editors");
    const emptyEl = $("editor-empty");
    const pathEl = $("editor-path");
    const statusEl = $("editor-status");
    const saveBtn = $("save");
    const warning = $("idle-warning");
    const countdown = $("idle-countdown");
    const keepBtn = $("keep-working");

    const base = (section.dataset.base || "").replace(/\/+$/, "");
    const memoryKey = MEMORY + (section.dataset.session || "");
    const project = section.dataset.project || "";
    const idleMs = Number(section.dataset.idleMs) || 0;
    const codePage = atelierURL("/projects", [project, "code"]);

    let ended = false;
    // remembering is off until what was remembered has been put back, so
    // a half-restored workbench never overwrites it.
    let remembering = false;

    // ---- small helpers --------------------------------------------------

    function csrf() {
      const meta = document.querySelector('meta[name="csrf-token"]');
      return meta ? meta.content : "";
    }

    function fileURL(path) {
      return atelierURL(base, ["file"], { path });
    }

    // refreshPanels asks htmx to reload the tree, the changes and the
    // history (they listen for "refresh from:body").
    function refreshPanels() {
      if (window.htmx && typeof window.htmx.trigger === "function") {
        window.htmx.trigger(document.body, "refresh");
      } else {
        document.body.dispatchEvent(new CustomEvent("refresh", { bubbles: true }));
      }
    }

    // problemText reads the {"error", "reason", "hint"} body of a failed
    // response, falling back to the status line.
    async function problemText(res) {
      let msg = "";
      try {
        const body = JSON.parse(await res.text());
        if (body && typeof body.error === "string") msg = body.error;
        if (body && typeof body.hint === "string" && body.hint) msg += " " + body.hint;
      } catch (_) {
        // not JSON
      }
      return msg || ("The server answered " + res.status + (res.statusText ? " " + res.statusText : "") + ".");
    }

    function toast(text, reason, kind) {
      if (typeof window.atelierToast === "function") window.atelierToast(text, reason, kind);
    }

    // typing says whether a key went to a text field (in the editor's
    // shadow root too), where "?" is a character, not a shortcut.
    function typing(event) {
      const t = event.composedPath ? event.composedPath()[0] : event.target;
      return !!t && t instanceof Element && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
    }

    function store(key, value) {
      try {
        if (value === null) localStorage.removeItem(key);
        else localStorage.setItem(key, String(value));
      } catch (_) {
        // private mode or full: sizes simply are not remembered
      }
    }

    function stored(key) {
      try {
        return localStorage.getItem(key);
      } catch (_) {
        return null;
      }
    }

    // ---- the idle deadline ----------------------------------------------

    // Times are kept on the server's clock: offset = serverNow - Date.now()
    // as of the latest answer, so Date.now() + offset is the server's now.
    let offset = 0;
    let deadline = NaN; // server time, ms since the epoch
    let lastServerNow = -Infinity;

    function noteClock(deadlineText, serverNowText) {
      const now = Date.parse(serverNowText || "");
      if (Number.isNaN(now)) return;
      if (now < lastServerNow) return; // an older answer arriving late
      lastServerNow = now;
      offset = now - Date.now();
      const d = Date.parse(deadlineText || "");
      if (!Number.isNaN(d)) deadline = d;
      else if (idleMs > 0) deadline = now + idleMs;
      tick();
    }

    function noteHeaders(headers) {
      if (!headers || typeof headers.get !== "function") return;
      const now = headers.get("X-Server-Now");
      if (now) noteClock(headers.get("X-Session-Idle-Deadline"), now);
    }

    function formatLeft(ms) {
      const s = Math.max(0, Math.ceil(ms / 1000));
      return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
    }

    function tick() {
      if (!warning) return;
      if (ended || Number.isNaN(deadline)) {
        warning.hidden = true;
        return;
      }
      const left = deadline - (Date.now() + offset);
      if (left < 60000) {
        if (countdown) countdown.textContent = formatLeft(left);
        warning.hidden = false;
      } else {
        warning.hidden = true;
      }
    }

    const ticker = setInterval(tick, 1000);
    document.addEventListener("visibilitychange", tick);

    // ---- talking to the server ------------------------------------------

    class Ended extends Error {}

    // call sends one request to the session API. It re-arms the idle
    // warning from the answer's headers and turns a 410 into the end of
    // the session (throwing Ended). Network failures throw a TypeError.
    async function call(method, url, opts) {
      const o = opts || {};
      const headers = new Headers(o.headers || {});
      if (!headers.has("Accept")) headers.set("Accept", "application/json");
      if (method !== "GET" && method !== "HEAD") headers.set("X-CSRF-Token", csrf());
      const res = await fetch(url, {
        method,
        headers,
        body: o.body,
        credentials: "same-origin",
        cache: "no-store",
        // A redirect here means a login page or similar, never the file.
        redirect: "manual",
      });
      if (res.type === "opaqueredirect") {
        throw new Error("the server sent the request elsewhere (are you still signed in? Reload the page).");
      }
      noteHeaders(res.headers);
      if (res.status === 410) {
        endSession(await problemText(res));
        throw new Ended();
      }
      return res;
    }

    function trouble(err) {
      return (err && err.message ? err.message : "network error");
    }

    // ---- editor tabs ----------------------------------------------------

    // A Tab is one open file. etag is the version its text is based on;
    // exists is false for a file not saved yet; saved is the text as last
    // read or written, which tells whether there are unsaved changes.
    const tabs = [];
    let active = null;
    let hostCounter = 0;
    const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

    class Tab {
      constructor(path, text, etag, exists) {
        this.path = path;
        this.etag = etag;
        this.exists = exists;
        this.saved = text;
        this.saving = null; // the promise of the save in flight
        this.saveAgain = false; // Ctrl+S pressed while a save was in flight
        this.status = { text: "", state: "", extra: null };
        this.closed = false;
        // Where the cursor and the scroll were when the tab was last hidden
        // (or remembered from before a reload), put back when it shows.
        this.view = null;

        this.host = document.createElement("div");
        this.host.className = "editor";
        this.host.id = "editor-host-" + ++hostCounter;
        this.host.setAttribute("role", "tabpanel");
        this.host.hidden = true;

        this.el = document.createElement("div");
        this.el.className = "editor-tab";
        this.el.setAttribute("role", "presentation");
        this.titleBtn = document.createElement("button");
        this.titleBtn.type = "button";
        this.titleBtn.className = "editor-tab-title";
        this.titleBtn.setAttribute("role", "tab");
        this.titleBtn.setAttribute("aria-controls", this.host.id);
        this.label = document.createElement("span");
        this.dirtyMark = document.createElement("span");
        this.dirtyMark.className = "dirty-mark";
        this.dirtyMark.textContent = "●";
        this.dirtyMark.title = "Unsaved changes";
        this.dirtyMark.hidden = true;
        this.titleBtn.append(this.label, this.dirtyMark);
        this.closeBtn = document.createElement("button");
        this.closeBtn.type = "button";
        this.closeBtn.className = "editor-tab-close";
        this.closeBtn.textContent = "×";
        this.el.append(this.titleBtn, this.closeBtn);
        this.setPath(path);

        this.titleBtn.addEventListener("click", () => activate(this));
        this.closeBtn.addEventListener("click", () => { closeTab(this); });
        // A middle click closes, as in other editors.
        this.titleBtn.addEventListener("auxclick", (e) => { if (e.button === 1) closeTab(this); });

        tabsEl.appendChild(this.el);
        editorsEl.appendChild(this.host);
        this.editor = null;
        if (window.AtelierEditor) {
          this.editor = window.AtelierEditor.create(this.host, {
            doc: text,
            filename: path,
            onSave: () => { save(this); },
            onChange: () => this.showDirty(),
          });
          if (ended) this.editor.setReadOnly(true);
        } else {
          this.setStatus("The editor failed to load; reload the page.", "error");
        }
      }

      setPath(path) {
        this.path = path;
        this.el.dataset.path = path;
        this.titleBtn.title = path;
        this.closeBtn.setAttribute("aria-label", "Close " + path);
        this.closeBtn.title = "Close " + path;
        labelTabs();
      }

      text() {
        return this.editor ? this.editor.getText() : this.saved;
      }

      dirty() {
        return !!this.editor && this.editor.getText() !== this.saved;
      }

      // showDirty updates the tab's mark and, when nothing else is being
      // said, its status.
      showDirty() {
        const dirty = this.dirty() || !this.exists;
        this.dirtyMark.hidden = !dirty;
        this.el.dataset.dirty = dirty ? "true" : "false";
        if (this.saving) return;
        if (this.status.state === "error" || this.status.state === "ended") {
          if (!this.dirty()) return;
        }
        if (this.dirty()) this.setStatus("unsaved changes", "dirty");
        else if (this.exists) this.setStatus("saved", "saved");
        else this.setStatus("new file, not saved yet", "dirty");
      }

      // setStatus is what the status line says while this tab is shown;
      // extra, if given, is an element after the text (a link, a button).
      setStatus(text, state, extra) {
        this.status = { text, state: state || "", extra: extra || null };
        if (this === active) renderStatus();
      }

      dispose() {
        this.closed = true;
        if (this.editor) this.editor.destroy();
        this.editor = null;
        this.el.remove();
        this.host.remove();
      }
    }

    // labelTabs names each tab by its file's name, with its folder when two
    // open files share a name.
    function labelTabs() {
      const count = {};
      const nameOf = (p) => p.slice(p.lastIndexOf("/") + 1);
      for (const t of tabs) count[nameOf(t.path)] = (count[nameOf(t.path)] || 0) + 1;
      for (const t of tabs) {
        const name = nameOf(t.path);
        const dir = t.path.includes("/") ? t.path.slice(0, t.path.lastIndexOf("/")) : "";
        t.label.textContent = count[name] > 1 && dir ? name + " — " + dir : name;
      }
    }

    function renderStatus() {
      if (!statusEl) return;
      const s = active ? active.status : { text: "", state: "", extra: null };
      statusEl.textContent = s.text;
      statusEl.dataset.state = s.state;
      if (s.extra) statusEl.append(" ", s.extra);
    }

    // say shows a status with no tab behind it (nothing is open).
    function say(text, state, extra) {
      if (active) {
        active.setStatus(text, state, extra);
        return;
      }
      if (!statusEl) return;
      statusEl.textContent = text;
      statusEl.dataset.state = state || "";
      if (extra) statusEl.append(" ", extra);
    }

    // flash shows a passing word (opening…, an open that failed) without
    // making it any tab's status: the next tab shown says its own again.
    function flash(text, state) {
      if (!statusEl) return;
      statusEl.textContent = text;
      statusEl.dataset.state = state || "";
    }

    function tabOf(path) {
      return tabs.find((t) => t.path === path) || null;
    }

    // activate shows tab (or nothing) in the editor area. The shown
    // editor's host carries id="editor".
    function activate(tab, focus = true) {
      closeDiff();
      if (active && active !== tab) rest(active);
      active = tab;
      for (const t of tabs) {
        const on = t === tab;
        t.host.hidden = !on;
        if (on) t.host.id = "editor";
        else if (t.host.id === "editor") t.host.id = "editor-host-" + ++hostCounter;
        t.titleBtn.setAttribute("aria-controls", t.host.id);
        t.titleBtn.setAttribute("aria-selected", on ? "true" : "false");
        t.titleBtn.tabIndex = on ? 0 : -1;
        t.el.classList.toggle("current", on);
      }
      if (emptyEl) emptyEl.hidden = !!tab;
      if (pathEl) pathEl.textContent = tab ? tab.path : "";
      if (saveBtn) saveBtn.disabled = !tab || ended;
      renderStatus();
      markOpenInTree();
      if (tab) {
        wake(tab);
        tab.el.scrollIntoView({ block: "nearest", inline: "nearest" });
        if (focus && tab.editor) tab.editor.focus();
      }
      remember();
    }

    // drawn says whether el is on screen (not hidden, nor inside
    // something hidden).
    function drawn(el) {
      return el.getClientRects().length > 0;
    }

    // rest notes where tab's cursor and scroll are as it is hidden: a
    // hidden editor has no scroll position of its own to read later.
    function rest(tab) {
      if (tab.editor && !tab.closed && drawn(tab.host)) tab.view = tab.editor.where();
    }

    // wake puts tab's cursor and scroll back as it shows.
    function wake(tab) {
      if (!tab.view || !tab.editor || !drawn(tab.host)) return;
      tab.editor.goTo(tab.view);
      tab.view = null;
    }

    // ---- a file's changes, in the editor area ---------------------------

    // The changes list's links load a file's diff into #diff (htmx); it
    // then takes the editor area's place until the person goes back (Back,
    // Escape, a tab, or Edit this file, which opens the file's tab).
    const editorArea = editorsEl ? editorsEl.closest(".wb-editors") : null;
    const diffView = $("diff-view");
    const diffBox = $("diff");
    const diffEdit = $("diff-edit");

    function diffShown() {
      return !!diffView && !diffView.hidden;
    }

    function showDiff() {
      const article = diffBox.querySelector("article.diff");
      const path = article ? article.dataset.path || "" : "";
      if (active) rest(active);
      diffView.hidden = false;
      if (editorArea) editorArea.classList.add("showing-diff");
      // A deleted file has no text to edit.
      const row = Array.from(document.querySelectorAll("#changes li[data-path]")).find((li) => li.dataset.path === path);
      diffEdit.hidden = !path || !!(row && row.classList.contains("deleted"));
      diffEdit.dataset.path = path;
      for (const li of document.querySelectorAll("#changes li[data-path]")) {
        const a = li.querySelector("a");
        if (a && li.dataset.path === path) a.setAttribute("aria-current", "true");
        else if (a) a.removeAttribute("aria-current");
      }
      // The keys follow what is shown: arrows scroll the diff, Escape goes back.
      diffBox.focus({ preventScroll: true });
    }

    function closeDiff(focus) {
      if (!diffShown()) return;
      diffView.hidden = true;
      if (editorArea) editorArea.classList.remove("showing-diff");
      for (const a of document.querySelectorAll("#changes a[aria-current]")) a.removeAttribute("aria-current");
      if (active) {
        wake(active);
        if (focus && active.editor) active.editor.focus();
      }
    }

    if (diffView && diffBox) {
      document.addEventListener("htmx:after:settle", (event) => {
        if (event.target === diffBox || diffBox.contains(event.target)) showDiff();
      });
      $("diff-back").addEventListener("click", () => closeDiff(true));
      diffEdit.addEventListener("click", () => { openFile(diffEdit.dataset.path || ""); });
      diffView.addEventListener("keydown", (event) => {
        if (event.key !== "Escape") return;
        event.preventDefault();
        closeDiff(true);
      });
    }

    // markOpenInTree flags the tree's link to the shown file.
    function markOpenInTree() {
      for (const a of document.querySelectorAll("#session-tree a.open-file")) {
        if (active && a.dataset.path === active.path) a.setAttribute("aria-current", "true");
        else a.removeAttribute("aria-current");
      }
    }

    // removeTab drops tab; when it was shown, its neighbour is shown
    // instead, with the focus unless focus is false.
    function removeTab(tab, focus = true) {
      const at = tabs.indexOf(tab);
      if (at < 0) return;
      tabs.splice(at, 1);
      tab.dispose();
      labelTabs();
      if (active === tab) activate(tabs[Math.min(at, tabs.length - 1)] || null, focus);
      remember();
    }

    // closeTab closes tab; with unsaved changes it first asks, inline in
    // the tab itself, and answers false.
    function closeTab(tab, force) {
      if (!tab || tab.closed) return true;
      if (!force && !ended && (tab.dirty() || (!tab.exists && tab.text() !== ""))) {
        askInTab(tab);
        return false;
      }
      removeTab(tab);
      return true;
    }

    function askInTab(tab) {
      if (tab.el.querySelector(".tab-confirm")) {
        tab.el.querySelector(".tab-confirm button").focus();
        return;
      }
      activate(tab, false);
      const ask = document.createElement("span");
      ask.className = "tab-confirm";
      ask.setAttribute("role", "group");
      ask.setAttribute("aria-label", "Close " + tab.path + " without saving?");
      const q = document.createElement("span");
      q.textContent = "Unsaved. Close?";
      const discard = document.createElement("button");
      discard.type = "button";
      discard.className = "danger tab-discard";
      discard.textContent = "Discard";
      const keep = document.createElement("button");
      keep.type = "button";
      keep.className = "secondary tab-keep";
      keep.textContent = "Keep";
      ask.append(q, discard, keep);
      tab.closeBtn.hidden = true;
      tab.el.appendChild(ask);
      const done = () => {
        ask.remove();
        tab.closeBtn.hidden = false;
      };
      discard.addEventListener("click", () => { done(); removeTab(tab); });
      keep.addEventListener("click", () => { done(); if (tab.editor) tab.editor.focus(); });
      ask.addEventListener("keydown", (e) => {
        if (e.key === "Escape") { e.preventDefault(); done(); tab.titleBtn.focus(); }
      });
      tab.setStatus("Unsaved changes in " + tab.path + ": discard them and close, or keep the tab.", "dirty");
      keep.focus();
    }

    let openSeq = 0; // to drop answers to superseded opens of the same file

    // openFile shows path in its tab, loading it first if it is not open.
    // reload: read the version on disk into the open tab.
    async function openFile(path, reload) {
      if (ended || !path) return null;
      let tab = tabOf(path);
      if (tab && !reload) {
        activate(tab);
        return tab;
      }
      const seq = ++openSeq;
      flash("opening " + path + "…", "busy");
      let res, text;
      try {
        res = await call("GET", fileURL(path));
        if (res.status === 404 && !tab) {
          // Not there (yet): a new file, created by its first save.
          tab = tabOf(path) || new Tab(path, "", null, false);
          if (!tabs.includes(tab)) tabs.push(tab);
          labelTabs();
          activate(tab);
          tab.showDirty();
          return tab;
        }
        if (!res.ok) {
          const msg = await problemText(res);
          flash(msg, "error");
          toast(msg);
          return null;
        }
        const bytes = await res.arrayBuffer();
        try {
          // ignoreBOM keeps a byte order mark in the text, so it is saved back.
          text = utf8.decode(bytes);
        } catch (_) {
          const msg = path + " is not UTF-8 text, so it cannot be edited here.";
          flash(msg, "error");
          toast(msg);
          return null;
        }
      } catch (err) {
        if (!(err instanceof Ended)) flash("Could not open " + path + ": " + trouble(err), "error");
        return null;
      }
      tab = tabOf(path);
      if (tab) {
        // A reload of the open tab: the text on disk replaces what is shown.
        tab.etag = res.headers.get("ETag");
        tab.exists = true;
        tab.saved = text;
        if (tab.editor) tab.editor.setText(text);
        tab.showDirty();
        activate(tab);
        return tab;
      }
      tab = new Tab(path, text, res.headers.get("ETag"), true);
      tabs.push(tab);
      labelTabs();
      activate(tab, seq === openSeq);
      tab.showDirty();
      return tab;
    }

    function reloadButton(tab) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link";
      b.textContent = "Reload";
      b.addEventListener("click", () => { openFile(tab.path, true); });
      return b;
    }

    // save writes tab (the shown one by default). A second Ctrl+S during a
    // save runs once the first has finished.
    function save(tab) {
      tab = tab || active;
      if (ended) return Promise.resolve();
      if (!tab) {
        say("No file is open.", "error");
        return Promise.resolve();
      }
      if (tab.saving) {
        tab.saveAgain = true;
        return tab.saving;
      }
      tab.saving = doSave(tab).finally(() => {
        tab.saving = null;
        if (tab.saveAgain) {
          tab.saveAgain = false;
          if (tab.dirty()) save(tab);
        }
      });
      return tab.saving;
    }

    async function doSave(tab) {
      const path = tab.path;
      const text = tab.text();
      const headers = { "Content-Type": "text/plain; charset=utf-8" };
      if (tab.exists) headers["If-Match"] = tab.etag || "";
      else headers["If-None-Match"] = "*";
      tab.setStatus("saving…", "busy");
      let res;
      try {
        res = await call("PUT", fileURL(path), { headers, body: text });
      } catch (err) {
        if (!(err instanceof Ended)) tab.setStatus("Could not save " + path + ": " + trouble(err) + " Your text is still here.", "error");
        return;
      }
      if (res.ok) {
        tab.etag = res.headers.get("ETag");
        tab.exists = true;
        tab.saved = text;
        tab.status.state = "";
        tab.saving = null;
        tab.showDirty();
        refreshPanels();
        return;
      }
      if (res.status === 412) {
        tab.setStatus(tab.exists
          ? "Not saved: " + path + " was changed in another tab — reload to see it."
          : "Not saved: " + path + " was created in another tab — reload to see it.",
          "error", reloadButton(tab));
        return;
      }
      const msg = "Not saved: " + (await problemText(res));
      tab.setStatus(msg, "error");
      toast(msg);
    }

    // retitle moves the tabs of path (a file, or everything under a
    // folder) to their new path, and learns the new file's version.
    async function renamed(from, to) {
      for (const tab of tabs.slice()) {
        let next = "";
        if (tab.path === from) next = to;
        else if (tab.path.startsWith(from + "/")) next = to + tab.path.slice(from.length);
        else continue;
        tab.setPath(next);
        try {
          const res = await call("GET", fileURL(next));
          if (!res.ok) continue;
          const text = utf8.decode(await res.arrayBuffer());
          tab.etag = res.headers.get("ETag");
          tab.exists = true;
          if (!tab.dirty() && tab.editor) tab.editor.setText(text);
          tab.saved = text;
          tab.showDirty();
        } catch (_) {
          // The tab keeps its text; a save will say what is wrong.
        }
      }
      if (active && pathEl) pathEl.textContent = active.path;
      markOpenInTree();
      remember();
    }

    // deleted closes the tabs of path; the focus stays where the deletion
    // was asked (the explorer's tree).
    function deleted(path) {
      for (const tab of tabs.slice()) {
        if (tab.path === path || tab.path.startsWith(path + "/")) removeTab(tab, false);
      }
    }

    async function keepWorking() {
      if (ended) return;
      if (keepBtn) keepBtn.disabled = true;
      try {
        const res = await call("POST", atelierURL(base, ["keepalive"]));
        if (!res.ok) {
          say(await problemText(res), "error");
          return;
        }
        let body = null;
        try { body = await res.json(); } catch (_) { /* headers did it */ }
        if (body) noteClock(body.idleDeadline, body.serverNow);
        if (warning) warning.hidden = true;
        tick();
      } catch (err) {
        if (!(err instanceof Ended)) say("Could not reach the server: " + trouble(err), "error");
      } finally {
        if (keepBtn) keepBtn.disabled = false;
      }
    }

    // endSession: the server said 410. Editing stops; the texts stay
    // visible (read-only) so nothing typed is lost from view.
    function endSession(message) {
      if (ended) return;
      ended = true;
      clearInterval(ticker);
      if (warning) warning.hidden = true;
      for (const t of tabs) if (t.editor) t.editor.setReadOnly(true);
      if (saveBtn) saveBtn.disabled = true;
      section.classList.add("ended");
      const link = document.createElement("a");
      link.href = codePage;
      link.textContent = "Back to the Code page";
      for (const t of tabs) t.status = { text: message || "This edit session has ended.", state: "ended", extra: null };
      say(message || "This edit session has ended.", "ended", link);
      command.ended();
    }

    // ---- what the workbench remembers ------------------------------------

    // place is where a tab's cursor and scroll are, to remember.
    function place(tab) {
      const at = tab.view || (tab.editor ? tab.editor.where() : null) || {};
      return { path: tab.path, anchor: at.anchor || 0, head: at.head || 0, top: at.top || 0, left: at.left || 0 };
    }

    // remember keeps the open tabs (those saved on the server: a file not
    // saved yet has nothing to reopen), the one shown and the panel's tab.
    function remember() {
      if (!remembering) return;
      const open = tabs.filter((t) => t.exists && !t.closed);
      store(memoryKey, JSON.stringify({
        at: Date.now(),
        tabs: open.map(place),
        active: active && active.exists ? active.path : "",
        panel: panelShown,
      }));
    }

    // recall reads what was remembered of this session, or null.
    function recall() {
      let m = null;
      try {
        m = JSON.parse(stored(memoryKey) || "null");
      } catch (_) {
        return null;
      }
      return m && typeof m === "object" && Array.isArray(m.tabs) ? m : null;
    }

    // forgetOldSessions keeps the memory of the KEEP_SESSIONS sessions
    // used last in this browser: sessions end, their keys would not.
    function forgetOldSessions() {
      const seen = new Map(); // session key → when it was last written
      try {
        for (let i = 0; i < localStorage.length; i++) {
          const key = localStorage.key(i);
          if (!key || !key.startsWith(MEMORY)) continue;
          const session = key.replace(/\.tree$/, "");
          let at = 0;
          try { at = Number(JSON.parse(localStorage.getItem(key)).at) || 0; } catch (_) { /* unreadable: oldest */ }
          seen.set(session, Math.max(seen.get(session) || 0, at));
        }
      } catch (_) {
        return;
      }
      const old = Array.from(seen).sort((a, b) => b[1] - a[1]).slice(KEEP_SESSIONS);
      for (const [session] of old) {
        store(session, null);
        store(session + ".tree", null);
      }
    }

    // droppedNote says which remembered files are no longer there.
    function droppedNote(paths) {
      if (paths.length === 1) return paths[0] + " no longer exists, so its tab was not reopened.";
      const list = paths.slice(0, -1).join(", ") + " and " + paths[paths.length - 1];
      return paths.length + " files no longer exist, so their tabs were not reopened: " + list + ".";
    }

    // restore reopens the remembered tabs in their order, each at its
    // cursor and scroll, shows the remembered panel tab, and then first
    // (the file the address names, which wins) or the tab shown before.
    async function restore(first) {
      const m = recall();
      if (m && panelTabs.some((t) => t.dataset.panel === m.panel)) selectPanel(m.panel);
      const wanted = (m ? m.tabs : []).filter((w) => w && typeof w.path === "string" && w.path)
        .slice(0, MAX_REMEMBERED_TABS);
      let read;
      try {
        read = await Promise.all(wanted.map(async (w) => {
          try {
            const res = await call("GET", fileURL(w.path));
            if (res.status === 404) return { w, gone: true };
            if (!res.ok) return { w, problem: await problemText(res) };
            return { w, text: utf8.decode(await res.arrayBuffer()), etag: res.headers.get("ETag") };
          } catch (err) {
            if (err instanceof Ended) throw err;
            return { w, problem: trouble(err) };
          }
        }));
      } catch (err) {
        if (err instanceof Ended) return;
        throw err;
      }
      const gone = [];
      for (const r of read) {
        if (r.gone) gone.push(r.w.path);
        else if (r.problem) toast(r.w.path + " could not be reopened: " + r.problem);
        else if (!tabOf(r.w.path)) {
          const tab = new Tab(r.w.path, r.text, r.etag, true);
          tab.view = { anchor: r.w.anchor, head: r.w.head, top: r.w.top, left: r.w.left };
          tabs.push(tab);
          tab.showDirty();
        }
      }
      labelTabs();
      if (gone.length) toast(droppedNote(gone), "tabs_dropped", "note");
      if (first) await openFile(first);
      else if (!active && tabs.length) activate(tabOf(m && m.active) || tabs[tabs.length - 1], false);
    }

    // ---- panes: sizes, dividers, the panel ------------------------------

    function clampExplorer(px) {
      const most = Math.max(MIN_EXPLORER, bench.clientWidth - MIN_EDITORS);
      return Math.round(Math.min(Math.max(px, MIN_EXPLORER), most));
    }

    function clampPanel(px) {
      const most = Math.max(MIN_PANEL, bench.clientHeight - MIN_EDITOR_ROWS);
      return Math.round(Math.min(Math.max(px, MIN_PANEL), most));
    }

    function setExplorer(px, keep) {
      const w = clampExplorer(px);
      root.style.setProperty("--explorer-width", w + "px");
      const split = $("split-explorer");
      if (split) split.setAttribute("aria-valuenow", String(w));
      if (keep) store(EXPLORER_KEY, w);
    }

    function setPanel(px, keep) {
      const h = clampPanel(px);
      // A chosen height is the height, not a cap (see app.css).
      root.classList.add("wb-sized");
      root.style.setProperty("--panel-height", h + "px");
      const split = $("split-panel");
      if (split) split.setAttribute("aria-valuenow", String(h));
      if (keep) store(PANEL_KEY, h);
    }

    function explorerWidth() {
      return $("session-tree").getBoundingClientRect().width;
    }

    function panelHeight() {
      return $("panel").getBoundingClientRect().height;
    }

    // A divider follows the pointer while it is held, and the arrow keys
    // while it has the focus.
    function divider(el, axis) {
      if (!el) return;
      const horizontal = axis === "x";
      el.addEventListener("pointerdown", (event) => {
        if (event.button !== 0) return;
        event.preventDefault();
        el.setPointerCapture(event.pointerId);
        el.classList.add("dragging");
        document.body.classList.add(horizontal ? "resizing-x" : "resizing-y");
        const start = horizontal ? event.clientX : event.clientY;
        const from = horizontal ? explorerWidth() : panelHeight();
        const move = (e) => {
          const delta = (horizontal ? e.clientX : e.clientY) - start;
          if (horizontal) setExplorer(from + delta, false);
          else setPanel(from - delta, false);
        };
        const up = () => {
          el.removeEventListener("pointermove", move);
          el.removeEventListener("pointerup", up);
          el.removeEventListener("pointercancel", up);
          el.classList.remove("dragging");
          document.body.classList.remove("resizing-x", "resizing-y");
          if (horizontal) setExplorer(explorerWidth(), true);
          else setPanel(panelHeight(), true);
        };
        el.addEventListener("pointermove", move);
        el.addEventListener("pointerup", up);
        el.addEventListener("pointercancel", up);
      });
      el.addEventListener("keydown", (event) => {
        let delta = 0;
        if (horizontal && event.key === "ArrowLeft") delta = -KEY_STEP;
        else if (horizontal && event.key === "ArrowRight") delta = KEY_STEP;
        else if (!horizontal && event.key === "ArrowUp") delta = KEY_STEP;
        else if (!horizontal && event.key === "ArrowDown") delta = -KEY_STEP;
        else return;
        event.preventDefault();
        if (horizontal) setExplorer(explorerWidth() + delta, true);
        else setPanel(panelHeight() + delta, true);
      });
    }

    const panelTabs = Array.from(document.querySelectorAll("#panel .panel-tabs [role=tab]"));
    const panelToggle = $("panel-toggle");
    let panelShown = "terminals";

    function panelHidden() {
      return root.classList.contains("wb-panel-hidden");
    }

    function setPanelHidden(hidden) {
      root.classList.toggle("wb-panel-hidden", hidden);
      if (panelToggle) {
        panelToggle.textContent = hidden ? "Show" : "Hide";
        panelToggle.setAttribute("aria-expanded", hidden ? "false" : "true");
      }
      store(PANEL_HIDDEN_KEY, hidden ? "1" : null);
    }

    // selectPanel makes one of the panel's tabs (terminals, command,
    // changes) the one it shows.
    function selectPanel(name) {
      panelShown = name;
      for (const t of panelTabs) {
        const on = t.dataset.panel === name;
        t.setAttribute("aria-selected", on ? "true" : "false");
        t.tabIndex = on ? 0 : -1;
        const body = $(t.getAttribute("aria-controls"));
        if (body) body.hidden = !on;
      }
      remember();
    }

    // showPanel shows one of the panel's tabs, opening the panel if it was
    // hidden.
    function showPanel(name, focus) {
      setPanelHidden(false);
      selectPanel(name);
      if (focus) {
        if (name === "terminals") document.dispatchEvent(new CustomEvent("atelier:terminal-focus"));
        else if (name === "command") { const i = document.querySelector("#command-form input[name=command]"); if (i) i.focus(); }
        else { const t = panelTabs.find((p) => p.dataset.panel === name); if (t) t.focus(); }
      }
    }

    // toggleTerminal is Ctrl+`: show the terminals, or hide the panel when
    // they are what it shows.
    function toggleTerminal() {
      if (!panelHidden() && panelShown === "terminals") {
        setPanelHidden(true);
        if (active && active.editor) active.editor.focus();
        return;
      }
      showPanel("terminals", true);
    }

    for (const t of panelTabs) {
      t.addEventListener("click", () => showPanel(t.dataset.panel, false));
      t.addEventListener("keydown", (event) => {
        if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
        event.preventDefault();
        const at = panelTabs.indexOf(t);
        const next = panelTabs[(at + (event.key === "ArrowRight" ? 1 : panelTabs.length - 1)) % panelTabs.length];
        showPanel(next.dataset.panel, false);
        next.focus();
      });
    }
    if (panelToggle) panelToggle.addEventListener("click", () => setPanelHidden(!panelHidden()));

    if (tabsEl) {
      tabsEl.addEventListener("keydown", (event) => {
        if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
        const btn = event.target instanceof Element ? event.target.closest(".editor-tab-title") : null;
        const at = tabs.findIndex((t) => t.titleBtn === btn);
        if (at < 0) return;
        event.preventDefault();
        const next = tabs[(at + (event.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length];
        activate(next, false);
        next.titleBtn.focus();
      });
    }

    // ---- the command box ------------------------------------------------

    const command = (function () {
      const form = $("command-form");
      const runBtn = $("command-run");
      const cancelBtn = $("command-cancel");
      const stateEl = $("command-state");
      const resultEl = $("command-result");
      const dot = $("command-running-dot");
      let running = false;
      let timer = 0;
      // The running command's output, as it streams: live.pre shows it,
      // live.at is the offset after the last byte shown.
      let live = null;

      function show(text, state) {
        if (!stateEl) return;
        stateEl.textContent = text;
        stateEl.dataset.state = state || "";
      }

      function seconds(ms) {
        return (ms / 1000).toFixed(1) + " s";
      }

      function setRunning(on) {
        running = on;
        if (runBtn) runBtn.disabled = on || ended;
        if (cancelBtn) {
          cancelBtn.hidden = !on;
          cancelBtn.disabled = false;
        }
        if (dot) dot.hidden = !on;
        if (form) form.setAttribute("aria-busy", on ? "true" : "false");
      }

      // ticking shows "Running … · N s" from began (performance.now()).
      function ticking(line, began) {
        const tickRun = () => show("Running " + line + " · " + seconds(performance.now() - began), "running");
        tickRun();
        clearInterval(timer);
        timer = setInterval(tickRun, 100);
      }

      // The page keeps at most this much of a command's output as it
      // streams; the server's ring keeps 1 MiB of it.
      const LIVE_CHARS = 1 << 20;

      // follow streams the session's running command into the result
      // area: stdout and stderr as the command wrote them, one text (the
      // answer at the end shows them apart). The old result stays until
      // the first byte comes. onExit gets the stream's exit event; when
      // the stream cannot be had (the command has not started yet, or has
      // ended), retry() says whether to ask again in a moment.
      function follow(onExit, retry) {
        stopFollowing();
        const l = { at: 0, source: null, pre: null, text: null, decoder: new TextDecoder(), retryTimer: 0, stopped: false };
        live = l;
        const append = (text) => {
          if (!text) return;
          if (!l.pre) {
            const article = document.createElement("article");
            article.className = "command-result live";
            l.pre = document.createElement("pre");
            l.pre.className = "live";
            l.text = document.createTextNode("");
            l.pre.appendChild(l.text);
            article.appendChild(l.pre);
            if (resultEl) resultEl.replaceChildren(article);
          }
          const atBottom = l.pre.scrollHeight - l.pre.scrollTop - l.pre.clientHeight < 8;
          l.text.appendData(text);
          if (l.text.length > 2 * LIVE_CHARS) l.text.deleteData(0, l.text.length - LIVE_CHARS);
          if (atBottom) l.pre.scrollTop = l.pre.scrollHeight;
        };
        l.append = append;
        const connect = () => {
          if (l.stopped) return;
          const es = new EventSource(atelierURL(base, ["commands", "current", "stream"], { from: l.at }));
          l.source = es;
          const at = (id) => {
            const n = Number(id);
            if (id !== "" && Number.isFinite(n) && n >= 0) l.at = n;
          };
          es.addEventListener("text", (e) => {
            if (es !== l.source) return;
            const text = atelierStream.text(e.data);
            if (text === null) return;
            at(e.lastEventId);
            // Text starts on a character: bytes of one an out event left
            // unfinished are a U+FFFD, as decoding all the bytes would make.
            append(l.decoder.decode() + text);
          });
          es.addEventListener("out", (e) => {
            if (es !== l.source) return;
            const bytes = atelierStream.bytes(e.data);
            if (!bytes) return;
            at(e.lastEventId);
            append(l.decoder.decode(bytes, { stream: true }));
          });
          es.addEventListener("gap", (e) => {
            if (es !== l.source) return;
            at(e.lastEventId);
            l.decoder = new TextDecoder();
            const n = Number(e.data);
            append("\n[… " + (Number.isFinite(n) ? n.toLocaleString("en") : e.data) + " bytes not kept …]\n");
          });
          es.addEventListener("resync", (e) => {
            if (es !== l.source) return;
            // This tab fell a whole ring behind: follow again from the
            // last byte shown; the new stream tells the gap.
            at(e.lastEventId);
            es.close();
            connect();
          });
          es.addEventListener("exit", (e) => {
            if (es !== l.source) return;
            at(e.lastEventId);
            append(l.decoder.decode());
            es.close();
            l.source = null;
            let info = {};
            try {
              info = JSON.parse(e.data) || {};
            } catch (_) {
              // keep the defaults
            }
            onExit(info, l);
          });
          es.addEventListener("error", () => {
            if (es !== l.source || es.readyState === EventSource.CONNECTING) return; // the browser resumes by itself
            // Refused: no command runs (yet, or any more), or too many
            // streams.
            es.close();
            l.source = null;
            if (retry()) l.retryTimer = setTimeout(connect, 500);
          });
        };
        connect();
        return l;
      }

      function stopFollowing() {
        if (!live) return;
        live.stopped = true;
        clearTimeout(live.retryTimer);
        if (live.source) live.source.close();
        live = null;
      }

      async function run() {
        if (!form || running || ended) return;
        const fields = new URLSearchParams(new FormData(form));
        const line = (fields.get("command") || "").trim();
        if (!line) {
          show("Type a command to run.", "error");
          return;
        }
        showPanel("command", false);
        setRunning(true);
        const began = performance.now();
        ticking(line, began);
        // The answer comes when the command ends; meanwhile its output
        // streams. Its exit event is left to the answer.
        let answered = false;
        follow(() => {}, () => !answered);
        let res;
        try {
          res = await call("POST", form.getAttribute("action"), {
            headers: { "Content-Type": "application/x-www-form-urlencoded", "HX-Request": "true", "Accept": "text/html" },
            body: fields,
          });
          answered = true;
          const took = seconds(performance.now() - began);
          const body = await res.text();
          if (!res.ok) {
            let msg = "";
            try { msg = JSON.parse(body).error || ""; } catch (_) {
              const doc = new DOMParser().parseFromString(body, "text/html");
              const p = doc.querySelector(".problem h1");
              msg = p ? p.textContent.trim() : "";
            }
            msg = msg || "The server answered " + res.status + ".";
            show("Not run: " + msg, "error");
            toast(msg);
            return;
          }
          // The server's own fragment (escaped by its templates) replaces
          // the output as it streamed: the same bytes, stdout and stderr
          // apart, with the notes.
          stopFollowing();
          if (resultEl) resultEl.innerHTML = body;
          const canceled = resultEl && resultEl.querySelector("[data-canceled]");
          show((canceled ? "Cancelled after " : "Finished in ") + took + ".", canceled ? "canceled" : "done");
          refreshPanels();
        } catch (err) {
          if (!(err instanceof Ended)) show("Could not run the command: " + trouble(err), "error");
        } finally {
          answered = true;
          stopFollowing();
          clearInterval(timer);
          setRunning(false);
        }
      }

      // resume follows a command the page was rendered beside (after a
      // reload, or in another tab): its answer belongs to the request
      // that ran it, so the stream's exit event ends it here.
      function resume() {
        if (!form || !form.dataset.running || ended) return;
        const line = form.dataset.running;
        const since = Date.parse(form.dataset.runningSince || "") || NaN;
        const now = Date.parse(section.dataset.serverNow || "") || NaN;
        const began = performance.now() - (Number.isNaN(since - now) ? 0 : Math.max(0, now - since));
        showPanel("command", false);
        setRunning(true);
        ticking(line, began);
        let over = false;
        const finish = (text, state) => {
          over = true;
          stopFollowing();
          clearInterval(timer);
          setRunning(false);
          show(text, state);
          refreshPanels();
        };
        follow((info, l) => {
          if (info.error) {
            finish("Not finished: " + info.error, "error");
            return;
          }
          if (!l.pre) l.append(" ");
          const article = l.pre.parentNode;
          const head = document.createElement("header");
          const badge = document.createElement("span");
          badge.className = "badge " + (info.canceled ? "warn" : info.code === 0 ? "ok" : "bad");
          badge.textContent = info.canceled ? "cancelled" : "exit " + info.code;
          const took = document.createElement("span");
          took.className = "muted";
          took.textContent = " " + (Number(info.durationMs) || 0) + " ms";
          head.append(badge, took);
          article.prepend(head);
          article.dataset.exit = String(info.code);
          if (info.canceled) article.dataset.canceled = "true";
          if (Array.isArray(info.notes) && info.notes.length) {
            const ul = document.createElement("ul");
            ul.className = "notes";
            for (const n of info.notes) {
              const li = document.createElement("li");
              li.textContent = String(n);
              ul.appendChild(li);
            }
            article.appendChild(ul);
          }
          const ms = Number(info.durationMs) || 0;
          finish((info.canceled ? "Cancelled after " : "Finished in ") + seconds(ms) + ".", info.canceled ? "canceled" : "done");
        }, () => {
          // It ended between the page's render and the stream: its answer
          // went to the request that ran it; the history has its exit.
          if (!over) finish("The command has ended; the history below has its exit status.", "done");
          return false;
        });
      }

      async function cancel() {
        if (!running) return;
        if (cancelBtn) cancelBtn.disabled = true;
        try {
          const res = await call("POST", atelierURL(base, ["commands", "cancel"]));
          // 409: it ended by itself meanwhile; its answer is on the way.
          if (!res.ok && res.status !== 409) {
            const msg = await problemText(res);
            toast(msg);
            if (cancelBtn) cancelBtn.disabled = false;
          }
        } catch (err) {
          if (!(err instanceof Ended)) toast("Could not cancel: " + trouble(err));
          if (cancelBtn) cancelBtn.disabled = false;
        }
      }

      if (form) {
        form.addEventListener("submit", (event) => {
          event.preventDefault();
          run();
        });
      }
      if (cancelBtn) cancelBtn.addEventListener("click", () => { cancel(); });
      resume();
      return {
        run,
        ended() {
          stopFollowing();
          if (runBtn) runBtn.disabled = true;
        },
      };
    })();

    // ---- inline questions -------------------------------------------------

    // A button with data-confirm="id" shows the question id (which holds
    // the real action and a "Keep" button) in its place.
    document.addEventListener("click", (event) => {
      const t = event.target instanceof Element ? event.target : null;
      if (!t) return;
      const asker = t.closest("button[data-confirm]");
      if (asker) {
        const q = $(asker.dataset.confirm);
        if (!q) return;
        asker.hidden = true;
        q.hidden = false;
        const keep = q.querySelector("[data-keep]");
        if (keep) keep.focus();
        return;
      }
      const keep = t.closest("[data-keep]");
      if (keep) {
        const q = keep.closest("[data-question]");
        if (!q) return;
        q.hidden = true;
        const back = document.querySelector('button[data-confirm="' + q.id + '"]');
        if (back) { back.hidden = false; back.focus(); }
      }
    });

    // ---- quick open ---------------------------------------------------------

    const finder = $("finder");
    const findInput = $("find-query");
    let enterHeld = false;

    function openFinder() {
      if (!finder || !findInput) return;
      if (!finder.open) finder.showModal();
      findInput.select();
      findInput.dispatchEvent(new Event("find-open"));
    }

    function findOptions() {
      return Array.from(finder.querySelectorAll('#find-results [role="option"]'));
    }

    function selectOption(options, at) {
      options.forEach((o, i) => o.setAttribute("aria-selected", i === at ? "true" : "false"));
      findInput.setAttribute("aria-activedescendant", options[at].id);
      options[at].scrollIntoView({ block: "nearest" });
    }

    function openFound(link) {
      if (!link) return;
      finder.close();
      openFile(link.dataset.path || "");
    }

    if (finder && findInput) {
      const opener = $("find-open");
      if (opener) opener.addEventListener("click", openFinder);
      finder.addEventListener("click", (event) => {
        if (event.target === finder) { finder.close(); return; }
        const link = event.target instanceof Element ? event.target.closest("#find-results a[data-path]") : null;
        if (!link) return;
        event.preventDefault();
        openFound(link);
      });
      findInput.addEventListener("keydown", (event) => {
        const options = findOptions();
        let at = options.findIndex((o) => o.getAttribute("aria-selected") === "true");
        if (event.key === "ArrowDown" || event.key === "ArrowUp") {
          event.preventDefault();
          if (!options.length) return;
          at = event.key === "ArrowDown" ? Math.min(at + 1, options.length - 1) : Math.max(at - 1, 0);
          selectOption(options, at);
        } else if (event.key === "Enter") {
          event.preventDefault();
          enterHeld = true;
        }
      });
      // The file opens when Enter comes up: closing the dialog on its way
      // down would hand the rest of the key to the editor that had the
      // focus before, as a new line.
      findInput.addEventListener("keyup", (event) => {
        if (event.key !== "Enter" || !enterHeld) return;
        enterHeld = false;
        const options = findOptions();
        const at = options.findIndex((o) => o.getAttribute("aria-selected") === "true");
        openFound(at >= 0 ? options[at].querySelector("a[data-path]") : null);
      });
      document.addEventListener("htmx:after:settle", (event) => {
        if (!finder.contains(event.target)) return;
        const options = findOptions();
        if (options.length) selectOption(options, 0);
        else findInput.removeAttribute("aria-activedescendant");
      });
    }

    // ---- the shortcuts --------------------------------------------------

    const shortcuts = $("shortcuts");
    const shortcutsOpen = $("shortcuts-open");
    function openShortcuts() {
      if (shortcuts && !shortcuts.open) shortcuts.showModal();
    }
    if (shortcutsOpen) shortcutsOpen.addEventListener("click", openShortcuts);

    // Capture phase on window: these come before CodeMirror and xterm,
    // which would otherwise take Ctrl+Enter and Ctrl+` for themselves.
    window.addEventListener("keydown", (event) => {
      const mod = (event.ctrlKey || event.metaKey) && !event.altKey;
      if (mod && !event.shiftKey && (event.key === "s" || event.key === "S")) {
        event.preventDefault();
        event.stopPropagation(); // CodeMirror's Mod-s would save a second time
        save();
      } else if (mod && !event.shiftKey && (event.key === "p" || event.key === "P")) {
        event.preventDefault(); // the browser's print dialog
        event.stopPropagation();
        openFinder();
      } else if (mod && (event.code === "Backquote" || event.key === "`")) {
        event.preventDefault();
        event.stopPropagation();
        toggleTerminal();
      } else if (mod && event.key === "Enter") {
        event.preventDefault();
        event.stopPropagation();
        command.run();
      } else if (event.key === "?" && !event.ctrlKey && !event.metaKey && !event.altKey && !typing(event)) {
        if (finder && finder.open) return;
        event.preventDefault();
        openShortcuts();
      }
    }, true);

    // ---- wiring ---------------------------------------------------------

    // Tree links open in a tab. Capture phase, on document: the tree is
    // swapped by htmx at any time. Modified clicks (new tab) pass through.
    document.addEventListener("click", (event) => {
      const link = event.target instanceof Element ? event.target.closest("a.open-file") : null;
      if (!link || ended) return;
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      openFile(link.dataset.path || "");
    }, true);

    if (saveBtn) saveBtn.addEventListener("click", () => { save(); });
    if (keepBtn) keepBtn.addEventListener("click", () => { keepWorking(); });

    window.addEventListener("beforeunload", (event) => {
      if (tabs.some((t) => t.dirty())) {
        event.preventDefault();
        event.returnValue = "";
      }
    });

    // htmx requests to the session (tree, changes list) re-arm the idle
    // warning too, and may be the first to learn that the session ended.
    document.addEventListener("htmx:after:request", (event) => {
      const ctx = event.detail && event.detail.ctx;
      const response = ctx && ctx.response;
      if (!response) return;
      noteHeaders(response.headers);
      if (response.status !== 410 || !base) return;
      let pathname = "";
      try {
        pathname = new URL(String((ctx.request && ctx.request.action) || ""), location.href).pathname;
      } catch (_) {
        return;
      }
      if (pathname === base || pathname.startsWith(base + "/")) endSession("This edit session has ended.");
    });
    document.addEventListener("htmx:after:settle", markOpenInTree);

    window.AtelierWorkbench = Object.freeze({
      open(path) { return openFile(String(path || "")); },
      closeTab(path) { return closeTab(tabOf(String(path || ""))); },
      renamed(from, to) { return renamed(String(from || ""), String(to || "")); },
      deleted(path) { deleted(String(path || "")); },
      reverted(path) { return tabOf(String(path || "")) ? openFile(String(path), true) : Promise.resolve(null); },
      isDirty(path) { const t = tabOf(String(path || "")); return !!t && (t.dirty() || !t.exists); },
    });

    // The stored sizes are on <html> already; keep them inside this window.
    if (stored(EXPLORER_KEY)) setExplorer(explorerWidth(), false);
    if (stored(PANEL_KEY) && !panelHidden()) setPanel(panelHeight(), false);
    setPanelHidden(panelHidden());
    divider($("split-explorer"), "x");
    divider($("split-panel"), "y");
    window.addEventListener("resize", () => {
      // Keep the panes inside a smaller window, without forgetting the sizes.
      setExplorer(explorerWidth(), false);
      if (!panelHidden() && root.classList.contains("wb-sized")) setPanel(panelHeight(), false);
    });

    // A reload or a closed tab keeps where the person was.
    window.addEventListener("pagehide", remember);
    document.addEventListener("visibilitychange", () => { if (document.visibilityState === "hidden") remember(); });

    noteClock(section.dataset.idleDeadline, section.dataset.serverNow);
    activate(null, false);
    forgetOldSessions();
    // The editor area's own hint says what to do while nothing is open.
    const first = section.dataset.openPath;
    restore(first).finally(() => {
      remembering = true;
      remember();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
