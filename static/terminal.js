// The session page's terminals: shells in the session's sandbox, shown as
// tabs of xterm.js terminals (static/vendor/xterm.min.js, which defines
// window.AtelierXterm and keeps xterm within the page's CSP).
//
// The page provides:
//   <section id="terminals" data-base="/projects/ID/sessions/SID">
//     <nav id="terminal-tabs"></nav> <button id="new-terminal">
//     <div id="terminal-panes"><p id="terminal-hint"></p></div>
//     <p id="terminal-error" hidden></p>
//   <meta name="csrf-token">
// The workbench (session.js) sizes the pane; every change of its size is
// fitted and sent to the shell. It asks for the keyboard with the event
// "atelier:terminal-focus" on document.
// htmx never swaps #terminal-panes, so the terminals and their event
// streams live as long as the page.
//
// Under {base}/terminals the server offers:
//   GET                    the terminals of the session: [{id, nextSeq}]
//   POST  cols, rows       a new one: 201 {id, nextSeq}; 429 at a limit
//   GET  {id}/stream?from= its output as Server-Sent Events: text (a JSON
//                          string of UTF-8 output) and out (base64 of
//                          other bytes), id = offset after their bytes;
//                          gap (bytes lost), exit ({"code", "signal"}),
//                          beat (idle; every data-heartbeat ms of
//                          #terminals)
//   POST {id}/input        raw bytes, numbered by X-Input-Seq from nextSeq;
//                          a repeated number is ignored, 429 = queue full
//   POST {id}/resize       cols, rows
//   DELETE {id}            stop it
// A 404 or 410 from any of them means the terminal (or the session) is gone.
(function () {
  "use strict";

  // The most input bytes one POST carries; a long paste goes in pieces.
  const MAX_BATCH = 64 << 10;

  // An input POST not answered within this is given up and sent again,
  // same bytes, same number, on a fresh connection: one stranded on a
  // dead connection would otherwise hold every later key behind it.
  const INPUT_TIMEOUT = 5000;

  // How long the stream may stay silent after the server took typed keys
  // before it is taken for dead: a shell echoes typing at once.
  const ECHO_WAIT = 3000;

  // The most connections a browser keeps open to one server over
  // HTTP/1.1 (Chromium's and Firefox's limit per host).
  const BROWSER_CONNECTIONS = 6;

  // How much typing not yet acknowledged is kept in the tab's session
  // storage, for the page after a reload; more is not kept.
  const KEEP_BYTES = 256 << 10;

  // The terminal's colours follow the system's light or dark setting, as
  // the page's do (app.css --terminal-background).
  const THEMES = {
    light: {
      background: "#fbfcfd",
      foreground: "#1d2330",
      cursor: "#1d2330",
      cursorAccent: "#fbfcfd",
      selectionBackground: "#cddcfb",
      black: "#1d2330", red: "#b42318", green: "#137a42", yellow: "#8a5a00",
      blue: "#2f5bd3", magenta: "#8a2fb0", cyan: "#0a6e7a", white: "#c8cdd6",
      brightBlack: "#667085", brightRed: "#d92d20", brightGreen: "#1a9c55", brightYellow: "#a15c00",
      brightBlue: "#4b74e6", brightMagenta: "#a34fc9", brightCyan: "#138a99", brightWhite: "#e4e7ec",
    },
    dark: {
      background: "#0d1117",
      foreground: "#e3e8f2",
      cursor: "#e3e8f2",
      cursorAccent: "#0d1117",
      selectionBackground: "#2b3d66",
    },
  };
  const darkScheme = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
  const currentTheme = () => (darkScheme && darkScheme.matches ? THEMES.dark : THEMES.light);

  const OPTIONS = {
    fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace',
    fontSize: 13,
    lineHeight: 1.15,
    scrollback: 10000,
    cursorBlink: true,
  };

  const DIM = "\x1b[0;2m";
  const PLAIN = "\x1b[0m";

  function start() {
    const section = document.getElementById("terminals");
    if (!section || section.dataset.started) return;
    section.dataset.started = "1";

    const $ = (id) => document.getElementById(id);
    const tabsEl = $("terminal-tabs");
    const panesEl = $("terminal-panes");
    const newBtn = $("new-terminal");
    const shareBtn = $("share-terminal");
    const recordBtn = $("record-terminal");
    const sharesBox = $("terminal-shares-box");
    const errorEl = $("terminal-error");
    const hintEl = $("terminal-hint");
    const base = (section.dataset.base || "").replace(/\/+$/, "");
    const encoder = new TextEncoder();
    // A stream that says nothing for two heartbeats is dead, even if its
    // connection stays open: it is closed and opened again.
    const heartbeat = Number(section.dataset.heartbeat) > 0 ? Number(section.dataset.heartbeat) : 15000;
    const silentFor = 2 * heartbeat + 1000;

    if (tabsEl && !tabsEl.hasAttribute("role")) tabsEl.setAttribute("role", "tablist");
    if (errorEl && !errorEl.hasAttribute("role")) errorEl.setAttribute("role", "alert");

    const tabs = []; // in the order of the tab strip
    let active = null;
    let counter = 0; // numbers the tabs' labels

    // ---- small helpers --------------------------------------------------

    function csrf() {
      const meta = document.querySelector('meta[name="csrf-token"]');
      return meta ? meta.content : "";
    }

    function showError(text) {
      if (!errorEl) return;
      errorEl.textContent = text || "";
      errorEl.hidden = !text;
    }

    // problemText reads the {"error", "reason"} body of a failed response,
    // falling back to the status line; either way a sentence.
    async function problemText(res) {
      let text = "";
      try {
        const body = JSON.parse(await res.text());
        if (body && typeof body.error === "string") text = body.error.trim();
      } catch (_) {
        // not JSON
      }
      if (!text) text = "The server answered " + res.status + (res.statusText ? " " + res.statusText : "");
      return /[.!?]$/.test(text) ? text : text + ".";
    }

    function gone(status) {
      return status === 404 || status === 410;
    }

    // call sends one request; non-GET requests carry the CSRF token.
    // Network failures throw, and so does no answer within timeout ms
    // when one is given.
    // A cancel signal, when given, aborts it too.
    async function call(method, url, body, headers, timeout, cancel) {
      const h = new Headers(headers || {});
      h.set("Accept", "application/json");
      if (method !== "GET") h.set("X-CSRF-Token", csrf());
      const abort = timeout ? new AbortController() : null;
      const timer = abort ? setTimeout(() => abort.abort(), timeout) : 0;
      const signals = [abort && abort.signal, cancel].filter(Boolean);
      let res;
      try {
        res = await fetch(url, {
          method,
          headers: h,
          body,
          credentials: "same-origin",
          cache: "no-store",
          redirect: "manual",
          signal: signals.length ? AbortSignal.any(signals) : undefined,
        });
      } finally {
        clearTimeout(timer);
      }
      if (res.type === "opaqueredirect") {
        throw new Error("the server sent the request elsewhere (are you still signed in? Reload the page).");
      }
      return res;
    }

    // callOverEvery sends one request over as many connections as the
    // browser keeps to the server, all at once, and gives the first answer
    // (cancelling the rest), or throws when none answers in time. After a
    // request went unanswered, every connection the browser keeps idle for
    // the server may be dead without knowing it (a route gone silently):
    // tried one at a time, each would cost the retry a whole timeout;
    // tried at once, the dead ones are found in one, and the browser opens
    // fresh connections for the rest. Only for requests the server applies
    // once however often they come (a numbered input).
    async function callOverEvery(method, url, body, headers, timeout) {
      const cancel = new AbortController();
      const tries = [];
      for (let i = 0; i < BROWSER_CONNECTIONS; i++) tries.push(call(method, url, body, headers, timeout, cancel.signal));
      try {
        return await Promise.any(tries);
      } catch (e) {
        throw e instanceof AggregateError ? e.errors[0] : e;
      } finally {
        cancel.abort();
      }
    }

    // button makes a plain button with its words and classes.
    function button(text, className) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = className;
      b.textContent = text;
      return b;
    }

    function form(fields) {
      const p = new URLSearchParams();
      for (const k of Object.keys(fields)) p.set(k, String(fields[k]));
      return p;
    }

    // terminalURL is the address of terminal id, or of its action.
    function terminalURL(id, action, query) {
      return atelierURL(base, action ? ["terminals", id, action] : ["terminals", id], query);
    }

    // base64Bytes decodes what the page stored; it throws on what it did
    // not store.
    function base64Bytes(data) {
      const bytes = atelierStream.bytes(data);
      if (!bytes) throw new Error("not base64");
      return bytes;
    }

    // base64Of encodes bytes for session storage.
    function base64Of(bytes) {
      let bin = "";
      for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
      return btoa(bin);
    }

    // nextFrame runs fn at the next animation frame, or soon when the page
    // is hidden (browsers pause animation frames then).
    function nextFrame(fn) {
      if (document.visibilityState === "hidden" || typeof requestAnimationFrame !== "function") {
        setTimeout(fn, 16);
      } else {
        requestAnimationFrame(fn);
      }
    }

    // ---- one terminal ---------------------------------------------------

    class Tab {
      constructor() {
        this.id = "";
        this.n = ++counter;
        this.ended = false;
        this.closed = false;
        this.view = null;
        this.source = null; // the EventSource
        this.offset = 0; // the output offset shown so far
        this.atLineStart = true; // the last byte written was a line feed
        this.carry = null; // the start of a split UTF-8 character
        this.retryTimer = 0;
        this.retryDelay = 500;
        // input
        this.seq = 1; // the number of the next batch
        this.pending = []; // Uint8Arrays not in a batch yet
        this.pendingBytes = 0;
        this.sending = false; // a batch is in flight (or waiting to retry)
        this.inflight = null; // {seq, bytes}: the batch sent and not yet acknowledged
        this.inputRefused = false; // the server refused a batch outright
        this.frameQueued = false;
        // what the person sees of the connection
        this.state = "";
        this.lastHeard = Date.now(); // the stream's last event, or its start
        this.heardAt = Date.now(); // the stream's last event, for the person
        this.watchTimer = 0;
        // resize
        this.sentCols = 0;
        this.sentRows = 0;
        this.resizing = false;
        this.resizeAgain = false;

        const paneId = "terminal-pane-" + this.n;
        this.el = document.createElement("span");
        this.el.className = "terminal-tab";
        this.selectBtn = document.createElement("button");
        this.selectBtn.type = "button";
        this.selectBtn.className = "terminal-select";
        this.selectBtn.setAttribute("role", "tab");
        this.selectBtn.setAttribute("aria-controls", paneId);
        this.selectBtn.setAttribute("aria-selected", "false");
        this.selectBtn.textContent = "Terminal " + this.n;
        this.closeBtn = document.createElement("button");
        this.closeBtn.type = "button";
        this.closeBtn.className = "terminal-close";
        this.closeBtn.setAttribute("aria-label", "Close terminal " + this.n);
        this.closeBtn.title = "Close terminal " + this.n;
        this.closeBtn.textContent = "×";
        // Live, reconnecting or offline, and the typing not yet sent:
        // the words are announced, the seconds beside them are not.
        this.statusEl = document.createElement("span");
        this.statusEl.className = "terminal-status";
        this.statusText = document.createElement("span");
        this.statusText.setAttribute("role", "status");
        this.statusText.setAttribute("aria-live", "polite");
        this.statusClock = document.createElement("span");
        this.statusClock.className = "terminal-silence";
        this.statusClock.setAttribute("aria-hidden", "true");
        this.statusEl.append(this.statusText, this.statusClock);
        // REC: the terminal is being recorded (its stream's rec events).
        this.recording = false;
        this.recEl = document.createElement("span");
        this.recEl.className = "rec-mark";
        this.recEl.textContent = "REC";
        this.recEl.title = "This terminal is being recorded";
        this.recEl.setAttribute("role", "status");
        this.recEl.hidden = true;
        this.el.append(this.selectBtn, this.recEl, this.statusEl, this.closeBtn);

        this.pane = document.createElement("div");
        this.pane.className = "terminal-pane";
        this.pane.id = paneId;
        this.pane.setAttribute("role", "tabpanel");
        this.pane.setAttribute("aria-label", "Terminal " + this.n);
        this.pane.hidden = true;

        // Keys typed while the connection is down, shown before they go:
        // beside the pane, since the pane's own children are hidden by the
        // terminal's shadow root.
        this.blindEl = document.createElement("div");
        this.blindEl.className = "terminal-blind";
        this.blindEl.setAttribute("role", "region");
        this.blindEl.setAttribute("aria-label", "Keys typed while disconnected");
        this.blindEl.hidden = true;
        const blindSay = document.createElement("span");
        blindSay.textContent = "Typed while disconnected, sent when the connection returns: ";
        this.blindText = document.createElement("code");
        const sendNow = button("Try now", "secondary send");
        const discard = button("Discard", "danger discard");
        this.blindEl.append(blindSay, this.blindText, sendNow, discard);
        sendNow.addEventListener("click", () => { if (this.wake) this.wake(); });
        discard.addEventListener("click", () => this.discardTyping());

        this.selectBtn.addEventListener("click", () => activate(this));
        this.closeBtn.addEventListener("click", () => { closeTab(this); });
      }

      // setRecording shows whether the terminal is being recorded; a
      // recording that ended is in the list below the panes.
      setRecording(on) {
        const was = this.recording;
        this.recording = on;
        this.recEl.hidden = !on;
        if (active === this) showTabButtons(this);
        if (was && !on) refreshRecordings();
      }

      // mount shows the tab and builds its xterm. The pane is made visible
      // first, so xterm can measure its cells.
      mount() {
        if (tabsEl) tabsEl.appendChild(this.el);
        if (panesEl) panesEl.append(this.blindEl, this.pane);
        tabs.push(this);
        activate(this, false);
        this.view = window.AtelierXterm.create(this.pane, Object.assign({}, OPTIONS, { theme: currentTheme() }));
        this.view.fit();
        const term = this.view.terminal;
        term.onData((text) => this.queueInput(encoder.encode(text)));
        term.onBinary((text) => {
          const bytes = new Uint8Array(text.length);
          for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i) & 0xff;
          this.queueInput(bytes);
        });
      }

      get terminal() {
        return this.view ? this.view.terminal : null;
      }

      // attach starts the output stream for terminal id, replaying from
      // offset from.
      attach(id, nextSeq, from) {
        this.id = id;
        if (active === this) showTabButtons(this);
        this.seq = Math.max(1, Number(nextSeq) || 1);
        this.pane.dataset.terminal = id;
        this.el.dataset.terminal = id;
        this.selectBtn.title = id;
        this.offset = from;
        this.restoreTyping();
        this.connect();
        this.watchTimer = setInterval(() => this.watch(), 1000);
        this.sendSize();
        this.scheduleSend(); // keys typed while it was starting, or before a reload
      }

      // ---- typing kept over a reload --------------------------------------

      storageKey() {
        return "atelier.terminal-input." + this.id;
      }

      // unsent is how many bytes of typing the server has not acknowledged.
      unsent() {
        return this.pendingBytes + (this.inflight ? this.inflight.bytes.length : 0);
      }

      // keepTyping writes what is not yet acknowledged to the tab's
      // session storage, where the page after a reload finds it.
      keepTyping() {
        if (!this.id) return;
        try {
          if (!this.unsent() || this.ended || this.unsent() > KEEP_BYTES) {
            sessionStorage.removeItem(this.storageKey());
            return;
          }
          const pending = new Uint8Array(this.pendingBytes);
          let at = 0;
          for (const b of this.pending) {
            pending.set(b, at);
            at += b.length;
          }
          sessionStorage.setItem(this.storageKey(), JSON.stringify({
            inflight: this.inflight ? { seq: this.inflight.seq, bytes: base64Of(this.inflight.bytes) } : null,
            pending: base64Of(pending),
          }));
        } catch (_) {
          // no storage here (private mode, full): typing is kept in the page only
        }
      }

      // restoreTyping takes back what an earlier page of this tab typed
      // and had not seen acknowledged. A batch numbered below the
      // server's next number was applied; one at or above it was not, and
      // goes again under its number (the server applies a number once).
      restoreTyping() {
        let saved = null;
        try {
          saved = JSON.parse(sessionStorage.getItem(this.storageKey()) || "null");
        } catch (_) {
          return;
        }
        if (!saved) return;
        try {
          if (saved.inflight && Number(saved.inflight.seq) >= this.seq) {
            this.inflight = { seq: Number(saved.inflight.seq), bytes: base64Bytes(saved.inflight.bytes) };
          }
          const pending = base64Bytes(saved.pending || "");
          if (pending.length) {
            this.pending.unshift(pending);
            this.pendingBytes += pending.length;
          }
        } catch (_) {
          // not ours: nothing to send
        }
        this.keepTyping();
        this.renderStatus();
      }

      // ---- what the person sees of the connection --------------------------

      // watch runs every second: a stream silent for two heartbeats is
      // dead, whatever its connection says, and is opened again from the
      // last byte shown; the status says for how long nothing came.
      watch() {
        if (this.ended || this.closed) return;
        if (this.source && Date.now() - this.lastHeard > silentFor) this.restartStream();
        this.renderStatus();
      }

      // restartStream closes a stream taken for dead and opens it again
      // from the last byte shown.
      restartStream() {
        this.source.close();
        this.source = null;
        this.setState("reconnecting");
        this.connect();
      }

      // dropStream closes a stream taken for dead; it is opened again on
      // the server's next answer (reconnectNow), or after a pause.
      dropStream() {
        this.source.close();
        this.source = null;
        this.setState("reconnecting");
        this.reconnectLater();
      }

      // expectEcho looks at the stream a moment after the server took
      // keys sent at sentAt: silent since, it is likely on a connection
      // that died without a word while the keys went over a fresh one (a
      // stranded route), and is opened again from its last byte, rather
      // than after two missed heartbeats. A program that does not echo
      // costs at most a reopen per ECHO_WAIT of typing.
      expectEcho(sentAt) {
        if (this.echoTimer || this.lastHeard >= sentAt) return;
        this.echoTimer = setTimeout(() => {
          this.echoTimer = 0;
          if (this.source && !this.ended && !this.closed && this.lastHeard < sentAt) this.restartStream();
        }, ECHO_WAIT);
      }

      heard() {
        this.lastHeard = this.heardAt = Date.now();
        if (this.state === "reconnecting" || this.state === "connecting") this.setState("");
      }

      renderStatus() {
        let words;
        let clock = "";
        if (this.ended) words = "";
        else if (navigator.onLine === false) words = "offline";
        else if (this.state === "connecting") words = "connecting";
        else if (this.state === "reconnecting") {
          words = "reconnecting";
          const quiet = Math.floor((Date.now() - this.heardAt) / 1000);
          if (quiet >= 2) clock = " · nothing for " + quiet + " s";
        } else words = "live";
        const n = this.unsent();
        if (words && n && (words !== "live" || this.inflightSlow())) {
          words += " · " + n.toLocaleString("en") + (n === 1 ? " key" : " keys") + " waiting";
        }
        if (this.statusText.textContent !== words) this.statusText.textContent = words;
        if (this.statusClock.textContent !== clock) this.statusClock.textContent = clock;
        this.statusEl.dataset.state = words.split(" ")[0] || "ended";
        this.renderBlind(n > 0 && !this.ended && (!words.startsWith("live") || this.inflightSlow()));
      }

      // renderBlind shows the keys waiting to be sent, control keys as
      // marks (⏎ Enter, ⇥ Tab, ⌫ Backspace, ⎋ Escape, ^C), the last 120.
      renderBlind(show) {
        show = show && active === this;
        if (this.blindEl.hidden === !show && !show) return;
        this.blindEl.hidden = !show;
        if (!show) return;
        const parts = this.inflight ? [this.inflight.bytes, ...this.pending] : this.pending;
        let text = "";
        const decoder = new TextDecoder();
        for (const part of parts) text += decoder.decode(part, { stream: true });
        text += decoder.decode();
        const marks = { "\r": "⏎", "\n": "↵", "\t": "⇥", "\x7f": "⌫", "\x1b": "⎋" };
        const shown = Array.from(text, (ch) => {
          if (marks[ch]) return marks[ch];
          const code = ch.charCodeAt(0);
          return code < 0x20 ? "^" + String.fromCharCode(code + 64) : ch;
        }).join("");
        const last = shown.length > 120 ? "…" + shown.slice(-120) : shown;
        if (this.blindText.textContent !== last) this.blindText.textContent = last;
      }

      // discardTyping drops the keys not yet sent. A batch already on its
      // way is sent again empty under its number: if the server never got
      // it, the number is spent on nothing; if it did, nothing changes.
      discardTyping() {
        this.pending = [];
        this.pendingBytes = 0;
        if (this.inflight) this.inflight.bytes = new Uint8Array(0);
        this.keepTyping();
        if (this.wake) this.wake();
        this.renderStatus();
        if (this.terminal) this.terminal.focus();
      }

      // inflightSlow: typing has been on its way for more than a moment.
      inflightSlow() {
        return this.inflight && Date.now() - this.inflight.since > 1000;
      }

      // write hands raw output bytes (or a string of our own) to xterm.
      write(data) {
        const term = this.terminal;
        if (!term || this.closed) return;
        term.write(data);
      }

      note(text) {
        this.write((this.atLineStart ? "" : "\r\n") + DIM + text + PLAIN + "\r\n");
        this.atLineStart = true;
      }

      connect() {
        if (this.ended || this.closed) return;
        const url = terminalURL(this.id, "stream", { from: this.offset });
        const es = new EventSource(url);
        this.source = es;
        this.lastHeard = Date.now();
        if (!this.state) this.setState("connecting");
        es.addEventListener("open", () => {
          if (es !== this.source) return;
          this.retryDelay = 500;
          this.heard();
        });
        es.addEventListener("beat", (e) => {
          if (es !== this.source) return;
          this.noteOffset(e.lastEventId);
          this.heard();
        });
        es.addEventListener("out", (e) => {
          if (es !== this.source) return;
          this.heard();
          let bytes = atelierStream.bytes(e.data);
          if (!bytes) return;
          this.noteOffset(e.lastEventId);
          bytes = atelierStream.joined(this.carry, bytes);
          this.carry = null;
          const whole = atelierStream.wholeLength(bytes);
          if (whole < bytes.length) {
            this.carry = bytes.slice(whole);
            bytes = bytes.subarray(0, whole);
          }
          if (bytes.length) {
            this.atLineStart = bytes[bytes.length - 1] === 10;
            this.write(bytes);
          }
        });
        es.addEventListener("text", (e) => {
          if (es !== this.source) return;
          this.heard();
          const text = atelierStream.text(e.data);
          if (text === null) return;
          this.noteOffset(e.lastEventId);
          // Text starts on a character, so bytes carried from an out event
          // can never finish theirs: xterm, given them all as bytes,
          // would drop them, and so does the page.
          this.carry = null;
          if (text) {
            this.atLineStart = text.charCodeAt(text.length - 1) === 10;
            this.write(text);
          }
        });
        es.addEventListener("rec", (e) => {
          if (es !== this.source) return;
          this.heard();
          this.setRecording(e.data === "on");
        });
        es.addEventListener("gap", (e) => {
          if (es !== this.source) return;
          this.heard();
          this.noteOffset(e.lastEventId);
          this.carry = null; // the rest of that character is lost
          const n = Number(e.data);
          this.note("[… " + (Number.isFinite(n) ? n.toLocaleString("en") : e.data) + " bytes not kept …]");
        });
        es.addEventListener("resync", (e) => {
          if (es !== this.source) return;
          // This tab fell so far behind the shell's output that the server
          // dropped its stream. Follow again from the last byte shown; the
          // new stream says how much was lost, if anything was.
          this.noteOffset(e.lastEventId);
          es.close();
          this.source = null;
          this.connect();
        });
        es.addEventListener("exit", (e) => {
          if (es !== this.source) return;
          this.noteOffset(e.lastEventId);
          this.carry = null;
          let info = {};
          try {
            info = JSON.parse(e.data) || {};
          } catch (_) {
            // keep the defaults
          }
          if (info.signal) this.note("[process ended by signal " + info.signal + "]");
          else if (info.code != null) this.note("[process exited with code " + info.code + "]");
          else this.note("[process exited]");
          this.end();
        });
        es.addEventListener("error", () => {
          if (es !== this.source || this.ended) return;
          if (es.readyState === EventSource.CONNECTING) {
            // The browser reconnects by itself, resuming at Last-Event-ID.
            this.setState("reconnecting");
            return;
          }
          // Closed for good: the server refused the stream. Find out why.
          es.close();
          this.source = null;
          this.setState("reconnecting");
          this.checkGone();
        });
      }

      noteOffset(id) {
        const n = Number(id);
        if (id !== "" && Number.isFinite(n) && n >= 0) this.offset = n;
      }

      // checkGone asks the server whether the terminal still exists, and
      // reconnects (after a pause) if it does.
      async checkGone() {
        if (this.ended || this.closed) return;
        let res = null;
        try {
          res = await call("GET", atelierURL(base, ["terminals"]));
        } catch (_) {
          // network trouble: try again below
        }
        if (this.ended || this.closed) return;
        if (res && gone(res.status)) {
          this.end("This terminal has ended.");
          return;
        }
        if (res && res.ok) {
          let list = null;
          try {
            list = await res.json();
          } catch (_) {
            // not JSON
          }
          if (Array.isArray(list) && !list.some((t) => t && t.id === this.id)) {
            this.end("This terminal has ended.");
            return;
          }
        }
        this.reconnectLater();
      }

      // reconnectLater opens the stream again after a pause that grows
      // while it keeps failing.
      reconnectLater() {
        const delay = this.retryDelay;
        this.retryDelay = Math.min(this.retryDelay * 2, 10000);
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => { if (!this.source) this.connect(); }, delay);
      }

      // reconnectNow reopens a stream that waits out its retry: the server
      // has just answered, so the connection is back, and what the person
      // typed should show now, not after the backoff.
      reconnectNow() {
        if (this.source || this.ended || this.closed || !this.id) return;
        clearTimeout(this.retryTimer);
        this.retryDelay = 500;
        this.connect();
      }

      // end marks the terminal as over: no more streaming, input or sizing.
      end(message) {
        if (this.ended) return;
        this.ended = true;
        clearTimeout(this.retryTimer);
        clearInterval(this.watchTimer);
        if (this.source) this.source.close();
        this.source = null;
        this.pending = [];
        this.pendingBytes = 0;
        this.inflight = null;
        this.keepTyping();
        if (this.recording) this.setRecording(false); // it ended with the shell
        else if (active === this) showTabButtons(this);
        if (message) this.note("[" + message.replace(/\.$/, "") + "]");
        const term = this.terminal;
        if (term) {
          term.options.disableStdin = true;
          term.options.cursorBlink = false;
          term.write("\x1b[?25l"); // no cursor in a terminal that is over
        }
        this.setState("ended");
      }

      setState(state) {
        if (this.ended && state !== "ended") return;
        this.state = state;
        for (const el of [this.el, this.pane]) {
          if (state) el.dataset.state = state;
          else delete el.dataset.state;
        }
        this.selectBtn.textContent = "Terminal " + this.n + (state === "ended" ? " (ended)" : "");
        this.renderStatus();
      }

      // ---- input: one POST per animation frame at most, in order --------

      queueInput(bytes) {
        if (this.ended || this.closed || this.inputRefused || !bytes.length) return;
        this.pending.push(bytes);
        this.pendingBytes += bytes.length;
        this.keepTyping();
        this.scheduleSend();
      }

      scheduleSend() {
        if (!this.id || this.frameQueued || this.sending || !this.unsent()) return;
        this.frameQueued = true;
        nextFrame(() => {
          this.frameQueued = false;
          this.sendBatch();
        });
      }

      // takeBatch removes up to MAX_BATCH pending bytes, as one array.
      takeBatch() {
        const size = Math.min(this.pendingBytes, MAX_BATCH);
        const batch = new Uint8Array(size);
        let at = 0;
        while (at < size) {
          const head = this.pending[0];
          const n = Math.min(head.length, size - at);
          batch.set(head.subarray(0, n), at);
          at += n;
          if (n === head.length) this.pending.shift();
          else this.pending[0] = head.subarray(n);
        }
        this.pendingBytes -= size;
        return batch;
      }

      // sendBatch posts the next batch under the next number, retrying
      // the very same bytes and number until the server has them. A batch
      // an earlier page of this tab had sent goes first, under its number.
      async sendBatch() {
        if (this.sending || this.ended || this.closed || !this.unsent()) return;
        this.sending = true;
        if (!this.inflight) this.inflight = { seq: this.seq, bytes: this.takeBatch() };
        this.inflight.since = Date.now();
        const seq = this.inflight.seq;
        this.keepTyping();
        let delay = 100;
        let sentAt = 0;
        let unanswered = false; // an earlier try of this batch timed out
        try {
          for (;;) {
            if (this.ended || this.closed) return;
            let res = null;
            try {
              // The batch as it is now: a discard empties it.
              const batch = this.inflight ? this.inflight.bytes : new Uint8Array(0);
              sentAt = Date.now();
              res = await (unanswered ? callOverEvery : call)("POST", terminalURL(this.id, "input"), batch, {
                "Content-Type": "application/octet-stream",
                "X-Input-Seq": String(seq),
              }, INPUT_TIMEOUT);
            } catch (_) {
              // Network trouble, or no answer in time: retry below, after
              // a timeout over every connection at once (callOverEvery).
              // A stream that has said nothing since the keys went is
              // likely on a dead connection too: it is closed now and
              // opened again from its last byte once the server answers,
              // so that it does not take a dead idle connection first.
              unanswered = Date.now() - sentAt >= INPUT_TIMEOUT;
              if (this.source && this.lastHeard < sentAt) this.dropStream();
            }
            // Any answer means the server is reachable again.
            if (res) this.reconnectNow();
            if (res && res.ok) {
              this.seq = seq + 1;
              this.inflight = null;
              this.keepTyping();
              this.expectEcho(sentAt);
              return;
            }
            if (res && gone(res.status)) {
              this.end("This terminal has ended.");
              return;
            }
            if (res && res.status !== 429 && res.status < 500) {
              // Refused outright (a lost sign-in, a bad request). Sending
              // other bytes under this number could mix two inputs up, so
              // this terminal takes no more typing until a reload.
              this.inputRefused = true;
              this.pending = [];
              this.pendingBytes = 0;
              this.inflight = null;
              this.keepTyping();
              showError("Typing was not sent: " + (await problemText(res)) + " Reload the page to go on.");
              return;
            }
            // 429 (the shell's input queue is full), a server error or the
            // network: the same bytes under the same number, a bit later.
            this.renderStatus();
            await new Promise((resolve) => {
              this.wake = resolve; // "Try now" cuts the wait short
              setTimeout(resolve, delay);
            });
            this.wake = null;
            delay = Math.min(delay * 2, res && res.status === 429 ? 1000 : 5000);
          }
        } finally {
          this.sending = false;
          this.renderStatus();
          this.scheduleSend();
        }
      }

      // ---- size ----------------------------------------------------------

      // fit sizes xterm to the pane and tells the server the new size.
      fit() {
        // A hidden pane (another tab, another panel, a folded panel) has
        // no size to fit to.
        if (!this.view || this.closed || this.pane.hidden || this.pane.clientHeight < 20 || this.pane.clientWidth < 20) return;
        this.view.fit();
        this.sendSize();
      }

      async sendSize() {
        const term = this.terminal;
        if (!term || !this.id || this.ended || this.closed) return;
        if (this.resizing) {
          this.resizeAgain = true;
          return;
        }
        const cols = term.cols;
        const rows = term.rows;
        if (cols === this.sentCols && rows === this.sentRows) return;
        this.resizing = true;
        let ok = false;
        try {
          const res = await call("POST", terminalURL(this.id, "resize"), form({ cols, rows }));
          if (gone(res.status)) this.end("This terminal has ended.");
          else if (res.ok) ok = true;
        } catch (_) {
          // network trouble: the next fit tries again
        }
        if (ok) {
          this.sentCols = cols;
          this.sentRows = rows;
        }
        this.resizing = false;
        if (this.resizeAgain) {
          this.resizeAgain = false;
          this.sendSize();
        }
      }

      // dispose removes the tab and its terminal from the page.
      dispose() {
        this.closed = true;
        clearTimeout(this.retryTimer);
        clearInterval(this.watchTimer);
        if (this.source) this.source.close();
        this.source = null;
        if (this.view) this.view.dispose();
        this.view = null;
        this.el.remove();
        this.pane.remove();
        this.blindEl.remove();
      }
    }

    // ---- the tab strip --------------------------------------------------

    // activate shows tab's pane (and hides the others); focus: move the
    // keyboard focus into its terminal.
    function activate(tab, focus = true) {
      if (active !== tab) closeShares();
      active = tab;
      if (hintEl) hintEl.hidden = tabs.length > 0;
      showTabButtons(tab);
      for (const t of tabs) {
        const on = t === tab;
        t.pane.hidden = !on;
        t.selectBtn.setAttribute("aria-selected", on ? "true" : "false");
        t.selectBtn.tabIndex = on ? 0 : -1;
        t.el.classList.toggle("current", on);
        if (t.id) t.renderStatus(); // only the shown tab's waiting keys show
      }
      if (tab && tab.view) {
        tab.fit();
        if (focus) tab.terminal.focus();
      }
    }

    // showTabButtons shows the buttons that act on the active terminal,
    // once it runs.
    function showTabButtons(tab) {
      const running = !!(tab && tab.id && !tab.ended);
      if (shareBtn) shareBtn.hidden = !running;
      if (recordBtn) {
        recordBtn.hidden = !running;
        const on = running && tab.recording;
        recordBtn.textContent = on ? "Stop recording" : "Record";
        recordBtn.setAttribute("aria-pressed", on ? "true" : "false");
      }
    }

    // ---- recording the active terminal ----------------------------------

    function refreshRecordings() {
      if (window.htmx && typeof window.htmx.trigger === "function") window.htmx.trigger(document.body, "recordings");
      else document.body.dispatchEvent(new CustomEvent("recordings", { bubbles: true }));
    }

    // toggleRecording starts or stops recording the active terminal; the
    // stream's rec event then shows it on every page that shows it.
    async function toggleRecording() {
      const tab = active;
      if (!tab || !tab.id || !recordBtn) return;
      recordBtn.disabled = true;
      // The stream's rec event may come before the answer does.
      const start = !tab.recording;
      try {
        const res = await call(start ? "POST" : "DELETE", terminalURL(tab.id, "recording"), null, null, INPUT_TIMEOUT);
        if (!res.ok) {
          showError(await problemText(res));
          return;
        }
        showError("");
        tab.setRecording(start);
        refreshRecordings();
      } catch (_) {
        showError("The server could not be reached to record the terminal; try again.");
      } finally {
        recordBtn.disabled = false;
      }
    }

    // ---- sharing the active terminal to watch -----------------------------

    // The panel is the server's (partials/terminal_shares); its forms
    // refresh it through htmx.
    function closeShares() {
      if (!sharesBox) return;
      sharesBox.hidden = true;
      sharesBox.replaceChildren();
      if (shareBtn) shareBtn.setAttribute("aria-expanded", "false");
    }

    async function toggleShares() {
      if (!sharesBox || !active || !active.id) return;
      if (!sharesBox.hidden) {
        closeShares();
        return;
      }
      try {
        const res = await call("GET", terminalURL(active.id, "shares"), null, { Accept: "text/html", "HX-Request": "true" }, INPUT_TIMEOUT);
        if (!res.ok) {
          showError(await problemText(res));
          return;
        }
        sharesBox.innerHTML = await res.text();
      } catch (_) {
        showError("The server could not be reached to share the terminal; try again.");
        return;
      }
      sharesBox.hidden = false;
      shareBtn.setAttribute("aria-expanded", "true");
      if (window.htmx) window.htmx.process(sharesBox);
      const input = sharesBox.querySelector("input[name=username]");
      if (input) input.focus();
    }

    // askClose asks, in the tab itself, before a running shell is stopped.
    function askClose(tab) {
      if (tab.el.querySelector(".tab-confirm")) return;
      const ask = document.createElement("span");
      ask.className = "tab-confirm";
      ask.setAttribute("role", "group");
      ask.setAttribute("aria-label", "Stop Terminal " + tab.n + " and whatever runs in it?");
      const stop = button("Stop", "danger");
      const keep = button("Keep", "secondary");
      ask.append("Stop it? ", stop, keep);
      tab.closeBtn.hidden = true;
      tab.el.appendChild(ask);
      const done = () => { ask.remove(); tab.closeBtn.hidden = false; };
      stop.addEventListener("click", () => { done(); closeTab(tab, true); });
      keep.addEventListener("click", () => { done(); tab.selectBtn.focus(); });
      ask.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); done(); tab.selectBtn.focus(); } });
      keep.focus();
    }

    async function closeTab(tab, confirmed) {
      if (!tab.ended && tab.id && !confirmed) {
        askClose(tab);
        return;
      }
      if (tab.id) {
        let res;
        try {
          res = await call("DELETE", terminalURL(tab.id));
        } catch (err) {
          showError("Could not close the terminal: " + (err && err.message ? err.message : "network error"));
          return;
        }
        if (!res.ok && !gone(res.status)) {
          showError("Could not close the terminal: " + (await problemText(res)));
          return;
        }
      }
      showError("");
      const at = tabs.indexOf(tab);
      if (at >= 0) tabs.splice(at, 1);
      tab.dispose();
      if (active === tab) activate(tabs[Math.min(at, tabs.length - 1)] || null);
    }

    // ---- new terminals, and those already running -----------------------

    let creating = false;

    async function newTerminal() {
      if (creating) return;
      if (!window.AtelierXterm) {
        showError("The terminal failed to load; reload the page.");
        return;
      }
      creating = true;
      if (newBtn) newBtn.disabled = true;
      // The xterm comes first: its fitted size is the shell's first size.
      const tab = new Tab();
      const previous = active;
      try {
        tab.mount();
        const term = tab.terminal;
        const res = await call("POST", atelierURL(base, ["terminals"]), form({ cols: term.cols, rows: term.rows }));
        if (!res.ok) throw new Error(await problemText(res));
        const info = await res.json();
        if (!info || typeof info.id !== "string") throw new Error("The server's answer made no sense.");
        if (tab.closed) {
          // Closed while it was starting: stop the shell as well.
          call("DELETE", terminalURL(info.id)).catch(() => {});
          return;
        }
        showError("");
        tab.sentCols = term.cols;
        tab.sentRows = term.rows;
        tab.attach(info.id, info.nextSeq, 0);
        tab.fit();
        if (active === tab) term.focus();
      } catch (err) {
        const at = tabs.indexOf(tab);
        if (at >= 0) tabs.splice(at, 1);
        tab.dispose();
        if (active === tab) {
          activate(previous && tabs.includes(previous) ? previous : tabs[tabs.length - 1] || null, false);
        }
        showError(err && err.message ? err.message : "Could not start a terminal.");
      } finally {
        creating = false;
        if (newBtn) newBtn.disabled = false;
      }
    }

    // reattach shows the session's running terminals, replaying what the
    // server still has of their output.
    async function reattach() {
      if (!window.AtelierXterm) {
        showError("The terminal failed to load; reload the page.");
        return;
      }
      let list;
      try {
        const res = await call("GET", atelierURL(base, ["terminals"]));
        if (!res.ok) {
          if (!gone(res.status)) showError("Could not list the terminals: " + (await problemText(res)));
          return;
        }
        list = await res.json();
      } catch (err) {
        showError("Could not list the terminals: " + (err && err.message ? err.message : "network error"));
        return;
      }
      if (!Array.isArray(list)) return;
      for (const info of list) {
        if (!info || typeof info.id !== "string") continue;
        if (tabs.some((t) => t.id === info.id)) continue;
        const tab = new Tab();
        try {
          tab.mount();
        } catch (err) {
          const at = tabs.indexOf(tab);
          if (at >= 0) tabs.splice(at, 1);
          tab.dispose();
          showError("The terminal failed to load: " + (err && err.message ? err.message : err));
          break;
        }
        tab.attach(info.id, info.nextSeq, 0);
      }
      if (tabs.length) activate(tabs[0], false);
    }

    // ---- wiring ---------------------------------------------------------

    // Fit the visible terminal when its box changes size, a little after
    // the last change.
    let fitTimer = 0;
    function fitSoon() {
      clearTimeout(fitTimer);
      fitTimer = setTimeout(() => { if (active) active.fit(); }, 100);
    }
    if (typeof ResizeObserver === "function" && panesEl) {
      new ResizeObserver(fitSoon).observe(panesEl);
    }
    window.addEventListener("resize", fitSoon);

    // The workbench shows the terminals (Ctrl+`): the keyboard goes to the
    // shown terminal, or to New terminal when there is none.
    document.addEventListener("atelier:terminal-focus", () => {
      if (active && active.terminal && !active.closed) {
        activate(active, false);
        fitSoon();
        active.terminal.focus();
      } else if (newBtn) {
        newBtn.focus();
      }
    });

    if (darkScheme && typeof darkScheme.addEventListener === "function") {
      darkScheme.addEventListener("change", () => {
        for (const t of tabs) if (t.terminal) t.terminal.options.theme = currentTheme();
      });
    }

    // Arrow keys move along the tab strip.
    if (tabsEl) {
      tabsEl.addEventListener("keydown", (event) => {
        if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
        const btn = event.target instanceof Element ? event.target.closest(".terminal-select") : null;
        const at = tabs.findIndex((t) => t.selectBtn === btn);
        if (at < 0) return;
        const next = tabs[(at + (event.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length];
        event.preventDefault();
        activate(next, false);
        next.selectBtn.focus();
      });
    }

    if (newBtn) newBtn.addEventListener("click", () => { newTerminal(); });
    if (shareBtn) shareBtn.addEventListener("click", () => { toggleShares(); });
    if (recordBtn) recordBtn.addEventListener("click", () => { toggleRecording(); });

    // Leaving the page with typing not yet sent asks first; a reload keeps
    // it (restoreTyping), a tab closed or gone elsewhere does not.
    window.addEventListener("beforeunload", (event) => {
      if (!tabs.some((t) => !t.ended && t.unsent() > 0)) return;
      event.preventDefault();
      event.returnValue = "";
    });
    // The network came back: streams waiting for their retry go at once,
    // and so does typing.
    window.addEventListener("online", () => {
      for (const t of tabs) {
        if (t.ended || t.closed || !t.id) continue;
        t.reconnectNow();
        t.renderStatus();
        t.scheduleSend();
      }
    });
    window.addEventListener("offline", () => { for (const t of tabs) t.renderStatus(); });

    reattach();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
