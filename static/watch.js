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
    const bytesOf = (data) => {
      const bin = atob(data);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      return bytes;
    };
    // cutLength is how many bytes at the end of bytes begin a character
    // they do not finish. Those wait for the next event: an out event may
    // finish it (and xterm drops a character it gets in two writes whose
    // first ends on a 0x80 byte), a text event never does.
    const cutLength = (bytes) => {
      const n = bytes.length;
      for (let back = 1; back <= 3 && back <= n; back++) {
        const b = bytes[n - back];
        if ((b & 0xc0) === 0x80) continue; // a continuation byte
        if (b < 0xc0) return 0;
        return back < (b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2) ? back : 0;
      }
      return 0;
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
      es.addEventListener("text", (e) => {
        heard(e);
        // Text starts on a character, so carried bytes never finish
        // theirs: xterm would drop them, and so does the page.
        carry = null;
        try {
          const text = JSON.parse(e.data);
          if (typeof text === "string") term.write(text);
        } catch (_) {
          // not a JSON string: never from our server
        }
      });
      es.addEventListener("out", (e) => {
        heard(e);
        let bytes;
        try {
          bytes = bytesOf(e.data);
        } catch (_) {
          return; // not base64: never from our server
        }
        if (carry) {
          const joined = new Uint8Array(carry.length + bytes.length);
          joined.set(carry);
          joined.set(bytes, carry.length);
          bytes = joined;
        }
        const cut = cutLength(bytes);
        carry = cut ? bytes.slice(bytes.length - cut) : null;
        if (bytes.length > cut) term.write(bytes.subarray(0, bytes.length - cut));
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
