// The Change page follows its Change live: each event of it on the
// project's stream fetches the status panel again.
(function () {
  "use strict";
  var root = document.getElementById("change");
  if (!root || !window.EventSource) return;
  var id = Number(root.dataset.change);
  var statusURL = root.dataset.statusUrl;
  var panel = document.getElementById("change-status");
  var refresh = function () {
    fetch(statusURL, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) panel.innerHTML = html; });
  };
  var es = null;
  var connect = function () {
    es = new EventSource(root.dataset.events);
    ["change.composed", "change.verified", "change.failed", "change.released", "change.waiting", "change.moved"].forEach(function (type) {
      es.addEventListener(type, function (ev) {
        try {
          var row = JSON.parse(ev.data);
          if (row.data && Number(row.data.changeId) === id) refresh();
        } catch (e) { /* not ours */ }
      });
    });
    // Events sent before the stream opened (or while it was away) are not
    // replayed: look at each opening.
    es.addEventListener("open", refresh);
    // The server dropped the stream because it fell behind: look now, and
    // follow a new stream after a moment.
    es.addEventListener("resync", function () {
      es.close();
      refresh();
      setTimeout(connect, 500);
    });
  };
  connect();
  window.addEventListener("pagehide", function () { es.close(); });
})();
