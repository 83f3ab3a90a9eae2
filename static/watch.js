// The watch page: a terminal someone shared with this person, shown
// read-only as it happens (static/vendor/xterm.min.js defines
// window.AtelierXterm).
//
// The page provides:
//   <p id="watch-status" role="status">
//   <div id="watch-pane" data-stream="…/watch/stream" data-heartbeat="ms">
//   <span id="watch-rec" hidden>: shown while the terminal is recorded
// The stream is the owner's terminal stream: text (a JSON string of UTF-8
// output) and out (base64 of other bytes), id = offset after their bytes;
// gap, resync, exit, beat and rec (on or off). The browser resumes it
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
    let carry = null; // the first bytes of a character an out event ended in
    let source = null;
    let ended = false;
    let lastHeard = Date.now();

    const note = (text) => term.write("\r\n\x1b[0;2m" + text + "\x1b[0m\r\n");
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
      es.addEventListener("text", (e) => {
        heard(e);
        // Text starts on a character, so carried bytes never finish
        // theirs: xterm would drop them, and so does the page.
        carry = null;
        const text = atelierStream.text(e.data);
        if (text !== null) term.write(text);
      });
      es.addEventListener("out", (e) => {
        heard(e);
        let bytes = atelierStream.bytes(e.data);
        if (!bytes) return;
        // The bytes of a character an out event left unfinished wait for
        // the next one: xterm drops a character it gets in two writes
        // whose first ends on a 0x80 byte.
        bytes = atelierStream.joined(carry, bytes);
        const whole = atelierStream.wholeLength(bytes);
        carry = whole < bytes.length ? bytes.slice(whole) : null;
        if (whole) term.write(bytes.subarray(0, whole));
      });
      es.addEventListener("gap", (e) => {
        heard(e);
        carry = null; // the rest of that character is lost
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
