// The project page's import forms: the upload and the import's progress
// are shown live under the forms, then the summary or the error, and the
// form stays as it was so a person can fix and send again. The server
// answers a stream of JSON lines on the request itself (see
// handlers.Code.importWatched). The upload form is shown by this script
// alone: an upload's CSRF token travels in the X-CSRF-Token header, which
// a plain form cannot send. Without it the git form still posts.
(function () {
  "use strict";

  function human(n) {
    if (n < 1024) return n + " bytes";
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let u = -1;
    do { n /= 1024; u++; } while (n >= 1024 && u < units.length - 1);
    return n.toFixed(1) + " " + units[u];
  }
  const count = (n) => Number(n || 0).toLocaleString("en");

  function start() {
    const status = document.getElementById("import-status");
    if (!status) return;
    document.querySelectorAll("form[data-import]").forEach((form) => {
      if (form.hasAttribute("data-needs-script")) form.hidden = false;
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        run(form, status);
      });
    });
  }

  // show replaces the status with a line of text and an optional bar.
  function show(status, state, text, bar) {
    status.dataset.state = state;
    status.textContent = "";
    if (bar) {
      const progress = document.createElement("progress");
      if (bar.max) {
        progress.max = bar.max;
        progress.value = bar.value;
      }
      status.appendChild(progress);
    }
    const line = document.createElement("span");
    line.className = "import-line";
    line.textContent = text;
    status.appendChild(line);
  }

  function seen(status, phase) {
    const phases = (status.dataset.phases || "").split(" ").filter(Boolean);
    if (!phases.includes(phase)) phases.push(phase);
    status.dataset.phases = phases.join(" ");
  }

  function run(form, status) {
    const buttons = form.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    status.dataset.phases = "";
    status.classList.remove("bad", "ok");
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("Accept", "application/x-ndjson, application/json");
    const meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) xhr.setRequestHeader("X-CSRF-Token", meta.content);
    let read = 0;
    let finished = false;

    const finish = (ok, text, hint) => {
      finished = true;
      buttons.forEach((b) => { b.disabled = false; });
      status.classList.add(ok ? "ok" : "bad");
      show(status, ok ? "done" : "error", text);
      if (hint) {
        const p = document.createElement("p");
        p.className = "hint";
        p.textContent = hint;
        status.appendChild(p);
      }
    };
    const line = (msg) => {
      if (msg.progress) {
        const st = msg.progress;
        seen(status, st.phase);
        const what = { writing: "Writing files", fetching: "Fetching the repository", committing: "Committing", publishing: "Publishing" }[st.phase] || st.phase;
        const detail = st.phase === "fetching" ? "" : ": " + count(st.files) + " files, " + human(st.bytes || 0) + " written";
        show(status, st.phase, what + detail, {});
      } else if (msg.done) {
        const d = msg.done;
        seen(status, "done");
        finish(true, "Imported " + count(d.files) + " files" + (d.bytes ? " (" + human(d.bytes) + ")" : "") +
          " as commit " + String(d.commit).slice(0, 12) + ".");
        const link = document.createElement("a");
        link.href = status.dataset.code;
        link.textContent = " Open the code";
        status.querySelector(".import-line").appendChild(link);
      } else if (msg.error) {
        status.dataset.reason = msg.reason || "";
        finish(false, msg.error, msg.hint);
      }
    };
    const consume = () => {
      const text = xhr.responseText;
      let end;
      while ((end = text.indexOf("\n", read)) >= 0) {
        const raw = text.slice(read, end);
        read = end + 1;
        if (!raw.trim()) continue;
        try { line(JSON.parse(raw)); } catch (_) { /* a torn line waits for the rest */ }
      }
    };

    xhr.upload.addEventListener("progress", (ev) => {
      seen(status, "uploading");
      show(status, "uploading", "Uploading: " + human(ev.loaded) + (ev.lengthComputable ? " of " + human(ev.total) : "") + " received",
        ev.lengthComputable ? { max: ev.total, value: ev.loaded } : {});
    });
    xhr.addEventListener("progress", () => { if (xhr.status === 200) consume(); });
    xhr.addEventListener("load", () => {
      if (xhr.status !== 200) {
        let problem = {};
        try { problem = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
        status.dataset.reason = problem.reason || "";
        finish(false, problem.error || "The import failed (" + xhr.status + ").", problem.hint);
        return;
      }
      consume();
      if (!finished) finish(false, "The import ended without a result; look at the code page before trying again.");
    });
    xhr.addEventListener("error", () => finish(false, "The server could not be reached; the import may not have happened."));
    show(status, "uploading", "Uploading…", {});
    xhr.send(new FormData(form));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
