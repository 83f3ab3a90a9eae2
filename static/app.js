// Every htmx request carries the page's CSRF token, as the server demands
// for anything that is not a GET.
document.addEventListener("htmx:config:request", function (event) {
  var meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.ctx.request.headers["X-CSRF-Token"] = meta.content;
});

// atelierURL builds every address a script asks for, by the same rule as
// the server's views.URL: base is a path the page wrote itself, each segment
// is escaped as one path segment, and query values (a file's path) go
// through URLSearchParams, so "b+c.txt" or "a&path=x" stay one value.
//   atelierURL(base, ["file"], { path: "src/b+c.txt" })
window.atelierURL = function (base, segments, query) {
  let url = String(base || "").replace(/\/+$/, "");
  for (const s of segments || []) url += "/" + encodeURIComponent(String(s));
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) params.append(k, String(v));
  const q = params.toString();
  return (url || "/") + (q ? "?" + q : "");
};

// atelierStream reads the output events of terminals' and commands'
// streams for the pages that show them (terminal.js, watch.js,
// session.js): a text event is one JSON string of valid UTF-8 that starts
// and ends on characters; an out event is base64 of bytes that are not
// UTF-8, or a character split across events. Data of neither shape never
// comes from our server, and reads as null.
window.atelierStream = {
  text(data) {
    try {
      const text = JSON.parse(data);
      return typeof text === "string" ? text : null;
    } catch (_) {
      return null;
    }
  },

  // bytes decodes base64 into bytes without ever making text of them:
  // xterm and TextDecoder decode UTF-8 across events themselves.
  bytes(data) {
    let bin;
    try {
      bin = atob(data);
    } catch (_) {
      return null;
    }
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  },

  // joined is carry (bytes an earlier event left, or null) and then bytes.
  joined(carry, bytes) {
    if (!carry || !carry.length) return bytes;
    const all = new Uint8Array(carry.length + bytes.length);
    all.set(carry);
    all.set(bytes, carry.length);
    return all;
  },

  // wholeLength is how many of bytes end on a character boundary: all of
  // them, unless they end inside a UTF-8 sequence. xterm 6.0.0 decodes
  // UTF-8 across writes itself, but drops a character whose bytes it got
  // in two writes with the first ending on a 0x80 continuation byte (an
  // em dash, curly quotes, an ellipsis...), so the few bytes of a split
  // character wait for the next event.
  wholeLength(bytes) {
    const n = bytes.length;
    for (let back = 1; back <= 3 && back <= n; back++) {
      const b = bytes[n - back];
      if ((b & 0xc0) === 0x80) continue; // a continuation byte
      if (b < 0xc0) return n; // ASCII (or a stray byte): nothing to wait for
      const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
      return back < need ? n - back : n;
    }
    return n;
  },
};

// Every htmx request that fails says so in a toast, with the server's own
// message (error bodies carry it in .problem h1 and the reason in
// data-reason), wherever the response was or was not swapped. A toast of
// kind "note" tells something that is not a failure, in a quieter colour.
(function () {
  "use strict";
  function toast(message, reason, kind) {
    let box = document.getElementById("toasts");
    if (!box) {
      box = document.createElement("div");
      box.id = "toasts";
      box.className = "toasts";
      box.setAttribute("role", "status");
      box.setAttribute("aria-live", "assertive");
      document.body.appendChild(box);
    }
    const item = document.createElement("div");
    item.className = kind === "note" ? "toast note" : "toast";
    if (reason) item.dataset.reason = reason;
    const text = document.createElement("span");
    text.textContent = message;
    item.appendChild(text);
    const close = document.createElement("button");
    close.type = "button";
    close.className = "link toast-close";
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "×";
    close.addEventListener("click", () => item.remove());
    item.appendChild(close);
    box.appendChild(item);
    setTimeout(() => item.remove(), 8000);
  }
  window.atelierToast = toast;

  function problemOf(ctx) {
    const status = ctx && ctx.response ? ctx.response.status : 0;
    let message = "", reason = "";
    const text = ctx && typeof ctx.text === "string" ? ctx.text : "";
    if (text.trim().startsWith("{")) {
      try {
        const body = JSON.parse(text);
        message = body.error || body.message || "";
        reason = body.reason || "";
      } catch (_) { /* not JSON after all */ }
    } else if (text) {
      const doc = new DOMParser().parseFromString(text, "text/html");
      const problem = doc.querySelector(".problem");
      if (problem) {
        message = (problem.querySelector("h1") || problem).textContent.trim();
        reason = problem.dataset.reason || "";
      }
    }
    return { message: message || "The request failed (" + status + ").", reason: reason };
  }

  document.addEventListener("htmx:response:error", (event) => {
    const p = problemOf(event.detail && event.detail.ctx);
    toast(p.message, p.reason);
  });
  document.addEventListener("htmx:error", (event) => {
    const ctx = event.detail && event.detail.ctx;
    if (ctx && ctx.response) return; // answered: htmx:response:error told it
    toast("The server could not be reached. Check your connection and try again.", "network");
  });
})();

// A live stream (hx-sse:connect) that comes back after it was cut may have
// missed hints: the server ends a stream that falls behind (with a resync
// hint when it can still be told) and cuts one whose writes stall, and a
// restart or a network hiccup ends it too. Each reconnection is then a
// resync: the parts that listen for it read themselves again.
document.addEventListener("htmx:sse:after:connection", function (event) {
  const el = event.target;
  if (!(el instanceof Element)) return;
  if (el.dataset.connected) htmx.trigger(el, "resync");
  el.dataset.connected = "yes";
});
