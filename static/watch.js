// The watch page: a terminal someone shared with this person, shown
// read-only as it happens (static/vendor/xterm.min.js defines
// window.AtelierXterm).
//
// The page provides:
//   <p id="watch-status" role="status">
//   <div id="watch-pane" data-stream="…/watch/stream" data-heartbeat="ms">
//   <span id="watch-rec" hidden>: shown while the terminal is recorded
// The stream is the owner's terminal stream: out (base64 bytes; id =
// offset after them), gap, resync, exit, beat and rec (on or off). The browser resumes it
// at Last-Event-ID by itself; a refused stream (the share revoked, the
// terminal closed) ends the watch.
(function () {
  "use strict";

  function start() {
    const pane = document.getElementById("watch-pane");
    const statusEl = document.getElementById("watch-status");
    if (!pane || pane.dataset.started || !window.AtelierXterm) return;
    pane.dataset.started = "1";
    const setStatus = (text) => {
      if (statusEl) statusEl.textContent = text;
    };
    const view = window.AtelierXterm.create(pane, {
      fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace',
      fontSize: 13,
      lineHeight: 1.15,
      scrollback: 10000,
      disableStdin: true,
      cursorBlink: false,
    });
    view.fit();
    window.addEventListener("resize", () => view.fit());
    const term = view.terminal;
    const heartbeat = Number(pane.dataset.heartbeat) > 0 ? Number(pane.dataset.heartbeat) : 15000;

    let offset = null; // the last byte shown, to resume from
    let source = null;
    let ended = false;
    let lastHeard = Date.now();

    const note = (text) => term.write("\r\n\x1b[0;2m" + text + "\x1b[0m\r\n");
    const bytesOf = (data) => {
      const bin = atob(data);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      return bytes;
    };
    const heard = (e) => {
      lastHeard = Date.now();
      if (e && e.lastEventId) offset = e.lastEventId;
    };

    function finish(text) {
      ended = true;
      if (source) source.close();
      source = null;
      setStatus(text);
    }

    function connect() {
      if (ended) return;
      const url = pane.dataset.stream + (offset === null ? "" : "?from=" + encodeURIComponent(offset));
      const es = new EventSource(url);
      source = es;
      lastHeard = Date.now();
      es.addEventListener("open", () => setStatus("Watching live. You cannot type here."));
      es.addEventListener("beat", heard);
      es.addEventListener("rec", (e) => {
        heard(e);
        const rec = document.getElementById("watch-rec");
        if (rec) rec.hidden = e.data !== "on";
      });
      es.addEventListener("out", (e) => {
        heard(e);
        try {
          term.write(bytesOf(e.data));
        } catch (_) {
          // not base64: never from our server
        }
      });
      es.addEventListener("gap", (e) => {
        heard(e);
        note("[… " + e.data + " bytes not kept …]");
      });
      es.addEventListener("resync", (e) => {
        heard(e);
        es.close();
        connect();
      });
      es.addEventListener("exit", () => {
        note("[the terminal ended]");
        finish("The terminal has ended.");
      });
      es.addEventListener("error", () => {
        if (es !== source || ended) return;
        if (es.readyState === EventSource.CONNECTING) {
          setStatus("Reconnecting…");
          return;
        }
        // Refused: the owner stopped sharing, or the terminal is gone.
        finish("You can no longer watch this terminal: its owner stopped sharing it, or it has closed.");
      });
    }

    // A stream silent for two heartbeats is dead even if its connection
    // stays open: it is opened again from the last byte shown.
    setInterval(() => {
      if (!ended && source && Date.now() - lastHeard > 2 * heartbeat + 1000) {
        source.close();
        setStatus("Reconnecting…");
        connect();
      }
    }, 1000);
    connect();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
