// The WAI-ARIA tree pattern for the file trees of the Code page and the
// edit session: arrows, Home and End move, Right and Left unfold, fold and
// step in or out, Enter is the item's own (a folder toggles, a file
// opens). Folders are <details><summary role="treeitem">, files links or
// other elements with role="treeitem"; the tree has one Tab stop.
//
//   AtelierTree.setup(pane)           once per pane that stays in the page
//   AtelierTree.focusItem(pane, item, quiet)
//   AtelierTree.findItem(pane, path)
(function () {
  "use strict";

  function items(pane) {
    // Visible items only: those inside a folded folder have no boxes.
    return Array.from(pane.querySelectorAll('[role="treeitem"]')).filter((e) => e.getClientRects().length > 0);
  }

  function findItem(pane, path) {
    return Array.from(pane.querySelectorAll('[role="treeitem"]')).find((e) => e.dataset.path === path) || null;
  }

  // focusItem makes item the tree's one Tab stop (a roving tabindex) and,
  // unless quiet, moves the focus there.
  function focusItem(pane, item, quiet) {
    pane.querySelectorAll('[role="treeitem"][tabindex="0"]').forEach((e) => e.setAttribute("tabindex", "-1"));
    item.setAttribute("tabindex", "0");
    if (!quiet) item.focus();
  }

  function isFolder(item) { return item.tagName === "SUMMARY"; }
  function isOpen(item) { return isFolder(item) && item.parentElement.open; }

  function parentFolder(item) {
    const details = item.closest("li").parentElement.closest("details");
    return details ? details.querySelector(":scope > summary") : null;
  }

  // keepTabStop gives the tree a Tab stop again when a swap replaced the
  // item that had it.
  function keepTabStop(pane) {
    if (pane.querySelector('[role="treeitem"][tabindex="0"]')) return;
    const first = pane.querySelector('[role="treeitem"]');
    if (first) first.setAttribute("tabindex", "0");
  }

  function setup(pane) {
    if (!pane || pane.dataset.tree) return;
    pane.dataset.tree = "1";
    keepTabStop(pane);
    document.addEventListener("htmx:after:settle", () => keepTabStop(pane));
    // details' toggle does not bubble: listen while it travels down.
    pane.addEventListener("toggle", (event) => {
      const summary = event.target.querySelector && event.target.querySelector(":scope > summary");
      if (summary) summary.setAttribute("aria-expanded", event.target.open ? "true" : "false");
    }, true);
    pane.addEventListener("focusin", (event) => {
      const item = event.target.closest('[role="treeitem"]');
      if (item) focusItem(pane, item, true);
    });
    pane.addEventListener("keydown", (event) => {
      const item = event.target.closest('[role="treeitem"]');
      if (!item || event.altKey || event.ctrlKey || event.metaKey) return;
      const all = items(pane);
      const at = all.indexOf(item);
      let next = null;
      switch (event.key) {
        case "ArrowDown": next = all[at + 1]; break;
        case "ArrowUp": next = all[at - 1]; break;
        case "Home": next = all[0]; break;
        case "End": next = all[all.length - 1]; break;
        case "ArrowRight":
          if (isFolder(item) && !isOpen(item)) item.click();
          else if (isOpen(item)) next = all[at + 1] && parentFolder(all[at + 1]) === item ? all[at + 1] : null;
          break;
        case "ArrowLeft":
          if (isOpen(item)) item.click();
          else next = parentFolder(item);
          break;
        default:
          return; // Enter and Space are the element's own: a folder toggles, a file opens
      }
      event.preventDefault();
      if (next) focusItem(pane, next);
    });
  }

  window.AtelierTree = { setup, focusItem, findItem, items, parentFolder, isFolder };
})();
