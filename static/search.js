// Content search on the Code page and in the workbench (Ctrl+Shift+F).
// The search box (partials/search_form) asks the server with htmx; with
// the SSE extension loaded the answer comes as events, one file's matches
// each and the summary last, appended to the box's results as they are
// found. A new search starts from an empty list; the "Searching…" line
// hides once the summary is there (app.css).
//
// The page provides form#search-form[data-results] with #search-query, and
// in the workbench the panel tab #panel-tab-search (session.js shows it).
(function () {
  "use strict";

  function start() {
    const form = document.getElementById("search-form");
    const input = document.getElementById("search-query");
    if (!form || !input) return;

    // Capture phase: this runs before htmx sends the request.
    form.addEventListener("submit", () => {
      const box = document.querySelector(form.dataset.results);
      if (!box) return;
      const status = document.createElement("p");
      status.className = "search-progress muted";
      status.setAttribute("role", "status");
      status.textContent = "Searching for " + JSON.stringify(input.value) + "…";
      box.replaceChildren(status);
    }, true);

    // A refused search (a bad expression, too many at once) is told in a
    // toast by app.js; the list says it ended.
    form.addEventListener("htmx:response:error", () => {
      const status = document.querySelector(form.dataset.results + " .search-progress");
      if (status) status.textContent = "The search was refused; the message says why.";
    });

    // Capture phase on window: before CodeMirror or xterm take the keys.
    window.addEventListener("keydown", (event) => {
      if (!(event.ctrlKey || event.metaKey) || !event.shiftKey || event.altKey) return;
      if (event.key !== "F" && event.key !== "f") return;
      event.preventDefault();
      event.stopPropagation();
      const tab = document.getElementById("panel-tab-search");
      if (tab) tab.click();
      input.focus();
      input.select();
    }, true);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
