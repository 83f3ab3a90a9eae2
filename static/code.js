// The Code page: quick open (Ctrl+P), keyboard walking of the tree (by
// static/tree.js, window.AtelierTree), and keeping the open file marked in
// the tree.
(function () {
  "use strict";

  function start() {
    const section = document.querySelector("section.code");
    if (!section) return;
    const pane = section.querySelector(".tree-pane");
    setupFinder(section);
    setupShortcuts(section);
    const { setup, findItem, focusItem } = window.AtelierTree;
    setup(pane);
    markOpenFile(pane, true);
    document.addEventListener("htmx:after:settle", () => markOpenFile(pane, false));
    // A breadcrumb's folder is shown and focused in the tree.
    section.addEventListener("click", (event) => {
      const crumb = event.target.closest("[data-reveal]");
      if (!crumb) return;
      const summary = findItem(pane, crumb.dataset.reveal);
      if (!summary) return;
      const details = summary.parentElement;
      if (!details.open) summary.click();
      focusItem(pane, summary);
    });
  }

  // ---- the shortcuts, behind "?" ----

  function setupShortcuts(section) {
    const dialog = section.querySelector("#shortcuts");
    const opener = section.querySelector("#shortcuts-open");
    if (!dialog) return;
    const open = () => { if (!dialog.open) dialog.showModal(); };
    opener && opener.addEventListener("click", open);
    document.addEventListener("keydown", (event) => {
      if (event.key !== "?" || event.ctrlKey || event.metaKey || event.altKey) return;
      const t = event.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return; // typing a "?"
      event.preventDefault();
      open();
    });
  }

  // ---- quick open ----

  function setupFinder(section) {
    const dialog = section.querySelector("#finder");
    const input = section.querySelector("#find-query");
    const opener = section.querySelector("#find-open");
    if (!dialog || !input) return;
    const open = () => {
      if (!dialog.open) dialog.showModal();
      input.select();
      input.dispatchEvent(new Event("find-open"));
    };
    opener && opener.addEventListener("click", open);
    document.addEventListener("keydown", (event) => {
      if ((event.ctrlKey || event.metaKey) && !event.altKey && event.key.toLowerCase() === "p") {
        event.preventDefault(); // the browser's print dialog
        open();
      }
    });
    // A click on the backdrop (the dialog itself, outside its box) closes it.
    dialog.addEventListener("click", (event) => { if (event.target === dialog) dialog.close(); });
    input.addEventListener("keydown", (event) => {
      const options = Array.from(dialog.querySelectorAll('#find-results [role="option"]'));
      let at = options.findIndex((o) => o.getAttribute("aria-selected") === "true");
      switch (event.key) {
        case "ArrowDown":
        case "ArrowUp":
          event.preventDefault();
          if (!options.length) return;
          at = event.key === "ArrowDown" ? Math.min(at + 1, options.length - 1) : Math.max(at - 1, 0);
          select(input, options, at);
          break;
        case "Enter": {
          event.preventDefault();
          const link = at >= 0 && options[at].querySelector("a");
          if (link) location.assign(link.href);
          break;
        }
      }
    });
    document.addEventListener("htmx:after:settle", (event) => {
      if (!dialog.contains(event.target)) return;
      const options = Array.from(dialog.querySelectorAll('#find-results [role="option"]'));
      if (options.length) select(input, options, 0);
      else input.removeAttribute("aria-activedescendant");
    });
  }

  function select(input, options, at) {
    options.forEach((o, i) => o.setAttribute("aria-selected", i === at ? "true" : "false"));
    input.setAttribute("aria-activedescendant", options[at].id);
    options[at].scrollIntoView({ block: "nearest" });
  }

  // markOpenFile marks the viewer's file in the tree and, on load, scrolls
  // it into view; the server has already unfolded the folders above it.
  function markOpenFile(pane, onLoad) {
    if (!pane) return;
    const { findItem, focusItem } = window.AtelierTree;
    const article = document.querySelector("#viewer article.file");
    const path = article ? article.dataset.path : "";
    pane.querySelectorAll('[aria-current="true"]').forEach((e) => e.removeAttribute("aria-current"));
    const item = path && findItem(pane, path);
    if (!item) return;
    item.setAttribute("aria-current", "true");
    if (onLoad) {
      focusItem(pane, item, true);
      item.scrollIntoView({ block: "nearest" });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
