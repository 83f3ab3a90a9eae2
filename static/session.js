// The edit session page: opens files from the tree in the editor
// (static/vendor/codemirror.min.js, window.AtelierEditor), saves and deletes
// them through the session's file API, and warns before the session times
// out for lack of activity.
//
// The page provides:
//   <section id="session" data-project data-session data-base data-idle-ms
//            data-idle-deadline data-server-now data-open-path>
//   a.open-file[data-path] links in the tree (swapped by htmx at any time)
//   #editor #editor-path #editor-status #save #new-file #delete-file
//   #idle-warning (hidden) with #idle-countdown and #keep-working
//   <meta name="csrf-token">
(function () {
  "use strict";

  function start() {
    const section = document.getElementById("session");
    if (!section || section.dataset.started) return;
    section.dataset.started = "1";

    const $ = (id) => document.getElementById(id);
    const editorEl = $("editor");
    const pathEl = $("editor-path");
    const statusEl = $("editor-status");
    const saveBtn = $("save");
    const newBtn = $("new-file");
    const deleteBtn = $("delete-file");
    const warning = $("idle-warning");
    const countdown = $("idle-countdown");
    const keepBtn = $("keep-working");

    const base = (section.dataset.base || "").replace(/\/+$/, "");
    const project = section.dataset.project || "";
    const idleMs = Number(section.dataset.idleMs) || 0;
    const codePage = atelierURL("/projects", [project, "code"]);

    if (statusEl && !statusEl.hasAttribute("role")) statusEl.setAttribute("role", "status");
    if (warning && !warning.hasAttribute("role")) warning.setAttribute("role", "alert");

    // ---- state ----------------------------------------------------------

    // current: the open file. etag is the version the editor's text is
    // based on; exists is false for a new file that was never saved; saved
    // is the text as last read or written, to tell whether there are
    // unsaved changes.
    let current = null;
    let editor = null;
    let ended = false;
    let saving = null; // the promise of the save in flight
    let saveAgain = false; // Ctrl-S pressed while a save was in flight
    let openSeq = 0; // to drop answers to superseded opens

    // ---- small helpers --------------------------------------------------

    function csrf() {
      const meta = document.querySelector('meta[name="csrf-token"]');
      return meta ? meta.content : "";
    }

    function fileURL(path) {
      return atelierURL(base, ["file"], { path });
    }

    // setStatus shows text in #editor-status; state (saved, dirty, busy,
    // error, ended) goes to data-state for the stylesheet. extra, if given,
    // is an element appended after the text (a link or a button).
    function setStatus(text, state, extra) {
      if (!statusEl) return;
      statusEl.textContent = text;
      statusEl.dataset.state = state || "";
      if (extra) {
        statusEl.append(" ", extra);
      }
    }

    function isDirty() {
      return !!(current && editor && editor.getText() !== current.saved);
    }

    function showCleanOrDirty() {
      if (!current) return;
      if (isDirty()) setStatus("unsaved changes", "dirty");
      else if (current.exists) setStatus("saved", "saved");
      else setStatus("new file, not saved yet", "dirty");
    }

    function updateButtons() {
      const open = !!current && !ended;
      if (saveBtn) saveBtn.disabled = !open;
      if (deleteBtn) deleteBtn.disabled = !open;
      if (newBtn) newBtn.disabled = ended;
    }

    // markOpenInTree flags the tree's link to the open file.
    function markOpenInTree() {
      for (const a of document.querySelectorAll("a.open-file")) {
        if (current && a.dataset.path === current.path) a.setAttribute("aria-current", "true");
        else a.removeAttribute("aria-current");
      }
    }

    // refreshPanels asks htmx to reload the changes list and the tree
    // (they listen for "refresh from:body").
    function refreshPanels() {
      if (window.htmx && typeof window.htmx.trigger === "function") {
        window.htmx.trigger(document.body, "refresh");
      } else {
        document.body.dispatchEvent(new CustomEvent("refresh", { bubbles: true }));
      }
    }

    function reloadButton() {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link";
      b.textContent = "Reload";
      b.addEventListener("click", () => { if (current) openFile(current.path, true); });
      return b;
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
      headers.set("Accept", "application/json");
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

    function networkTrouble(what, err) {
      if (err instanceof Ended) return;
      setStatus("Could not " + what + ": " + (err && err.message ? err.message : "network error") +
        (current ? " Your text is still here." : ""), "error");
    }

    // ---- the editor -----------------------------------------------------

    function showFile(path, text, etag, exists) {
      if (editor) editor.destroy();
      editor = null;
      current = { path, etag, exists, saved: text };
      if (pathEl) pathEl.textContent = path;
      if (editorEl && window.AtelierEditor) {
        editor = window.AtelierEditor.create(editorEl, {
          doc: text,
          filename: path,
          onSave: () => { save(); },
          onChange: showCleanOrDirty,
        });
        if (ended) editor.setReadOnly(true);
      } else {
        setStatus("The editor failed to load; reload the page.", "error");
      }
      showCleanOrDirty();
      updateButtons();
      markOpenInTree();
    }

    function closeFile() {
      if (editor) editor.destroy();
      editor = null;
      current = null;
      if (pathEl) pathEl.textContent = "";
      updateButtons();
      markOpenInTree();
    }

    const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

    // openFile loads path into the editor. reload: the person asked to see
    // the version on disk of the file already open.
    async function openFile(path, reload) {
      if (ended || !path) return;
      if (!reload && current && current.path === path) {
        if (editor) editor.focus();
        return;
      }
      if (saving) await saving.catch(() => {});
      if (isDirty()) {
        const question = current.path === path
          ? "Discard your unsaved changes to " + path + " and load the version on disk?"
          : "Discard your unsaved changes to " + current.path + "?";
        if (!window.confirm(question)) return;
      }
      const seq = ++openSeq;
      setStatus("opening " + path + "…", "busy");
      let res, text;
      try {
        res = await call("GET", fileURL(path));
        if (seq !== openSeq) return;
        if (!res.ok) {
          setStatus(await problemText(res), "error");
          return;
        }
        const bytes = await res.arrayBuffer();
        if (seq !== openSeq) return;
        try {
          // ignoreBOM keeps a byte order mark in the text, so it is saved back.
          text = utf8.decode(bytes);
        } catch (_) {
          setStatus(path + " is not UTF-8 text, so it cannot be edited here.", "error");
          return;
        }
      } catch (err) {
        if (seq === openSeq) networkTrouble("open " + path, err);
        return;
      }
      showFile(path, text, res.headers.get("ETag"), true);
      if (editor) editor.focus();
    }

    // save writes the open file. A second Ctrl-S during a save runs once
    // the first has finished.
    function save() {
      if (ended) return Promise.resolve();
      if (!current) {
        setStatus("No file is open.", "error");
        return Promise.resolve();
      }
      if (saving) {
        saveAgain = true;
        return saving;
      }
      saving = doSave().finally(() => {
        saving = null;
        if (saveAgain) {
          saveAgain = false;
          if (isDirty()) save();
        }
      });
      return saving;
    }

    async function doSave() {
      const file = current;
      const text = editor ? editor.getText() : file.saved;
      const headers = { "Content-Type": "text/plain; charset=utf-8" };
      if (file.exists) headers["If-Match"] = file.etag || "";
      else headers["If-None-Match"] = "*";
      setStatus("saving…", "busy");
      let res;
      try {
        res = await call("PUT", fileURL(file.path), { headers, body: text });
      } catch (err) {
        if (file === current) networkTrouble("save " + file.path, err);
        return;
      }
      if (res.ok) {
        file.etag = res.headers.get("ETag");
        file.exists = true;
        file.saved = text;
        if (file === current) showCleanOrDirty();
        refreshPanels();
        return;
      }
      if (file !== current) return;
      if (res.status === 412) {
        setStatus(file.exists
          ? "Not saved: " + file.path + " was changed in another tab — reload to see it."
          : "Not saved: " + file.path + " was created in another tab — reload to see it.",
          "error", reloadButton());
        return;
      }
      setStatus("Not saved: " + (await problemText(res)), "error");
    }

    async function deleteFile() {
      if (ended || !current) return;
      const file = current;
      if (!file.exists) {
        if (window.confirm("Discard the new file " + file.path + "? It was never saved.")) {
          closeFile();
          setStatus("Choose a file in the tree, or make a new one.", "");
        }
        return;
      }
      if (!window.confirm("Delete " + file.path + "?")) return;
      if (saving) await saving.catch(() => {});
      setStatus("deleting " + file.path + "…", "busy");
      let res;
      try {
        res = await call("DELETE", fileURL(file.path), { headers: { "If-Match": file.etag || "" } });
      } catch (err) {
        networkTrouble("delete " + file.path, err);
        return;
      }
      if (res.ok) {
        if (file === current) closeFile();
        setStatus("deleted " + file.path, "saved");
        refreshPanels();
        return;
      }
      if (file !== current) {
        setStatus("Not deleted: " + (await problemText(res)), "error");
        return;
      }
      if (res.status === 412) {
        setStatus("Not deleted: " + file.path + " was changed in another tab — reload to see it.",
          "error", reloadButton());
        return;
      }
      setStatus("Not deleted: " + (await problemText(res)), "error");
    }

    async function newFile() {
      if (ended) return;
      const dir = current && current.path.includes("/")
        ? current.path.slice(0, current.path.lastIndexOf("/") + 1) : "";
      const answer = window.prompt("Path of the new file:", dir);
      if (answer === null) return;
      const path = answer.trim().replace(/^\/+/, "");
      if (!path || path.endsWith("/")) {
        setStatus("A new file needs a name.", "error");
        return;
      }
      if (saving) await saving.catch(() => {});
      if (isDirty() && !window.confirm("Discard your unsaved changes to " + current.path + "?")) return;
      // Open it instead if it is there already.
      const seq = ++openSeq;
      setStatus("checking " + path + "…", "busy");
      let res;
      try {
        res = await call("GET", fileURL(path));
      } catch (err) {
        if (seq === openSeq) networkTrouble("check " + path, err);
        return;
      }
      if (seq !== openSeq) return;
      if (res.status === 404) {
        showFile(path, "", null, false);
        if (editor) editor.focus();
        return;
      }
      if (!res.ok) {
        setStatus(await problemText(res), "error");
        return;
      }
      let text;
      try {
        text = utf8.decode(await res.arrayBuffer());
      } catch (_) {
        setStatus(path + " already exists and is not UTF-8 text.", "error");
        return;
      }
      if (seq !== openSeq) return;
      showFile(path, text, res.headers.get("ETag"), true);
      setStatus(path + " already exists; opened it.", "saved");
      if (editor) editor.focus();
    }

    async function keepWorking() {
      if (ended) return;
      if (keepBtn) keepBtn.disabled = true;
      try {
        const res = await call("POST", atelierURL(base, ["keepalive"]));
        if (!res.ok) {
          setStatus(await problemText(res), "error");
          return;
        }
        let body = null;
        try { body = await res.json(); } catch (_) { /* headers did it */ }
        if (body) noteClock(body.idleDeadline, body.serverNow);
        if (warning) warning.hidden = true;
        tick();
      } catch (err) {
        networkTrouble("reach the server", err);
      } finally {
        if (keepBtn) keepBtn.disabled = false;
      }
    }

    // endSession: the server said 410. Editing stops; the text stays
    // visible (read-only) so nothing typed is lost from view.
    function endSession(message) {
      if (ended) return;
      ended = true;
      clearInterval(ticker);
      if (warning) warning.hidden = true;
      if (editor) editor.setReadOnly(true);
      updateButtons();
      section.classList.add("ended");
      const link = document.createElement("a");
      link.href = codePage;
      link.textContent = "Back to the Code page";
      setStatus(message || "This edit session has ended.", "ended", link);
    }

    // ---- wiring ---------------------------------------------------------

    // Tree links open in the editor. Capture phase, on document: the tree
    // is swapped by htmx at any time. Modified clicks (new tab) pass through.
    document.addEventListener("click", (event) => {
      const link = event.target instanceof Element ? event.target.closest("a.open-file") : null;
      if (!link || ended) return;
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      openFile(link.dataset.path || "");
    }, true);

    // Ctrl-S / Cmd-S anywhere on the page saves; inside the editor
    // CodeMirror has already handled it (and prevented the default).
    document.addEventListener("keydown", (event) => {
      if (event.defaultPrevented || event.altKey || event.shiftKey) return;
      if (!(event.ctrlKey || event.metaKey) || (event.key !== "s" && event.key !== "S")) return;
      event.preventDefault();
      save();
    });

    if (saveBtn) saveBtn.addEventListener("click", () => { save(); });
    if (newBtn) newBtn.addEventListener("click", () => { newFile(); });
    if (deleteBtn) deleteBtn.addEventListener("click", () => { deleteFile(); });
    if (keepBtn) keepBtn.addEventListener("click", () => { keepWorking(); });

    window.addEventListener("beforeunload", (event) => {
      if (isDirty()) {
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

    noteClock(section.dataset.idleDeadline, section.dataset.serverNow);
    updateButtons();
    const first = section.dataset.openPath;
    if (first) openFile(first);
    else setStatus("Choose a file in the tree, or make a new one.", "");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
