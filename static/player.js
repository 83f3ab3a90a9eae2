// The recording page: plays an asciicast v2 file (a header line, then
// [seconds, code, data] lines: "o" output, "r" a resize to COLSxROWS, "m" a
// marker) in a read-only terminal, at its own pace or faster
// (static/vendor/xterm.min.js defines window.AtelierXterm).
//
// The page provides:
//   <div id="player" data-cast="…/cast?play">
//   <button id="player-play">, <button id="player-restart">,
//   <select id="player-speed"> (0: no pauses), <span id="player-time">,
//   <p id="player-note" hidden>: what a marker event says
(function () {
  "use strict";

  // A pause longer than this in the recording plays as this long: nobody
  // wants to watch someone read documentation.
  const MAX_PAUSE = 2;

  function parse(text) {
    const lines = text.split("\n").filter((l) => l.trim() !== "");
    if (!lines.length) throw new Error("the recording is empty");
    const header = JSON.parse(lines[0]);
    if (!header || header.version !== 2) throw new Error("this is not an asciicast v2 recording");
    const events = [];
    for (const line of lines.slice(1)) {
      const e = JSON.parse(line);
      if (Array.isArray(e) && e.length === 3 && typeof e[0] === "number") events.push(e);
    }
    return { header, events };
  }

  function start() {
    const pane = document.getElementById("player");
    if (!pane || pane.dataset.started || !window.AtelierXterm) return;
    pane.dataset.started = "1";
    const playBtn = document.getElementById("player-play");
    const restartBtn = document.getElementById("player-restart");
    const speedSel = document.getElementById("player-speed");
    const timeEl = document.getElementById("player-time");
    const noteEl = document.getElementById("player-note");

    const view = window.AtelierXterm.create(pane, {
      fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace',
      fontSize: 13,
      lineHeight: 1.15,
      scrollback: 10000,
      disableStdin: true,
      cursorBlink: false,
    });
    const term = view.terminal;

    let cast = null;
    let next = 0; // the index of the next event
    let clock = 0; // the recording's time reached, in seconds, pauses shortened
    let played = 0; // the time shown so far
    let playing = false;
    let timer = 0;

    const speed = () => Number(speedSel ? speedSel.value : 1);
    const say = (text) => { if (timeEl) timeEl.textContent = text; };

    function show(e) {
      const [, code, data] = e;
      if (code === "o") term.write(data);
      else if (code === "r") {
        const m = /^(\d+)x(\d+)$/.exec(data);
        if (m) term.resize(Number(m[1]), Number(m[2]));
      } else if (code === "m" && noteEl) {
        noteEl.textContent = data;
        noteEl.hidden = false;
      }
    }

    // step shows every event that is due, then waits for the next one.
    function step() {
      timer = 0;
      if (!playing || !cast) return;
      const events = cast.events;
      while (next < events.length) {
        const e = events[next];
        const wait = Math.min(Math.max(e[0] - (next ? events[next - 1][0] : 0), 0), MAX_PAUSE);
        if (speed() > 0 && clock + wait > played + 1e-6) {
          timer = setTimeout(() => { played = clock + wait; step(); }, (clock + wait - played) * 1000 / speed());
          say(next + " of " + events.length + " events");
          return;
        }
        clock += speed() > 0 ? wait : 0;
        played = clock;
        show(e);
        next++;
      }
      playing = false;
      if (playBtn) playBtn.textContent = "Play again";
      say("The end: " + events.length + " events.");
    }
    function reset() {
      clearTimeout(timer);
      timer = 0;
      next = 0;
      clock = 0;
      played = 0;
      term.reset();
      if (noteEl) noteEl.hidden = true;
      if (cast) term.resize(cast.header.width || 80, cast.header.height || 24);
    }

    function play() {
      if (!cast) return;
      if (next >= cast.events.length) reset();
      playing = true;
      if (playBtn) playBtn.textContent = "Pause";
      step();
    }

    function pause() {
      playing = false;
      clearTimeout(timer);
      timer = 0;
      if (playBtn) playBtn.textContent = "Play";
    }

    if (playBtn) playBtn.addEventListener("click", () => (playing ? pause() : play()));
    if (restartBtn) restartBtn.addEventListener("click", () => { reset(); play(); });
    if (speedSel) speedSel.addEventListener("change", () => { if (playing) { clearTimeout(timer); step(); } });

    say("Loading the recording…");
    fetch(pane.dataset.cast, { credentials: "same-origin" })
      .then((res) => {
        if (!res.ok) throw new Error("the server answered " + res.status);
        return res.text();
      })
      .then((text) => {
        cast = parse(text);
        pane.dataset.events = String(cast.events.length);
        reset();
        play();
      })
      .catch((err) => say("The recording could not be played: " + err.message + "."));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
