// Entry point for static/vendor/xterm.min.js (built by vendor.sh): xterm.js
// and its fit addon as one classic script that defines one global,
// window.AtelierXterm, so the pages never need a module loader:
//
//   const view = AtelierXterm.create(hostElement, { fontSize: 13, ... });
//   view.terminal             // the xterm Terminal (write, onData, buffer, ...)
//   view.fit()                // size the terminal to the host element
//   view.proposeDimensions()  // {cols, rows} a fit would pick, or undefined
//   view.dispose()
//
// CSP. The pages forbid inline styles: no <style> element and no style
// attribute applies (style-src falls back to 'self'), and each try is
// reported as a violation, even an empty <style> element. xterm's DOM
// renderer writes its theme, cell-size and scrollbar rules as the text of
// three <style> elements it adds to the terminal, and gives 24-bit colours
// through setAttribute("style", ...). So:
//
//  - vendor.sh has xterm create <atelier-xterm-style> elements where it
//    created <style> ones. Such an element (defined below) renders nothing;
//    the text xterm gives it goes into a constructable stylesheet that the
//    element's root (here, the terminal's shadow root) adopts while the
//    element is connected. CSP does not restrict adoptedStyleSheets.
//  - vendor.sh rewrites xterm's one setAttribute("style", ...) into a CSSOM
//    assignment (element.style.cssText), which CSP allows.
//  - The terminal lives in a shadow root attached to the host element,
//    which adopts xterm.css (bundled as text) and a few rules of our own.
//
// Inherited properties (colour, CSS custom properties) still flow in from
// the page's stylesheet; the terminal's font and colours are its options.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import xtermCSS from "@xterm/xterm/css/xterm.css";

const STYLE_TAG = "atelier-xterm-style";

let sharedSheets = null;

// sheets returns the sheets every terminal's root adopts first: xterm.css
// and the box that fills the host element. They are made once, on first
// use, and shared.
function sheets() {
  if (!sharedSheets) {
    const base = new CSSStyleSheet();
    base.replaceSync(xtermCSS);
    const own = new CSSStyleSheet();
    // The page's own rules for the host element win over :host ones, so
    // the height here is only a fallback. --terminal-inset leaves a margin
    // around the terminal, in the host's background. xterm.css paints the
    // viewport black, which shows below the last whole row; the box gets
    // the theme's background instead (see create).
    own.replaceSync(
      ":host { display: block; position: relative; overflow: hidden; height: 20rem; }\n" +
      ":host([hidden]) { display: none; }\n" +
      ".box { position: absolute; inset: var(--terminal-inset, 0); }\n" +
      ".box > .xterm { height: 100%; }\n" +
      ".xterm .xterm-viewport { background-color: transparent; }\n" +
      STYLE_TAG + " { display: none; }\n");
    sharedSheets = [base, own];
  }
  return sharedSheets;
}

// XtermStyle stands in for the <style> elements xterm makes: its
// textContent is the text of its own constructable sheet, which the root
// it is connected to adopts (a shadow root or the document).
class XtermStyle extends HTMLElement {
  constructor() {
    super();
    this._sheet = new CSSStyleSheet();
    this._text = "";
    this._root = null;
  }

  get textContent() {
    return this._text;
  }

  set textContent(value) {
    this._text = value == null ? "" : String(value);
    this._sheet.replaceSync(this._text);
  }

  connectedCallback() {
    const root = this.getRootNode();
    if (!root || !("adoptedStyleSheets" in root)) return;
    if (this._root && this._root !== root) this.disconnectedCallback();
    if (!root.adoptedStyleSheets.includes(this._sheet)) {
      root.adoptedStyleSheets = [...root.adoptedStyleSheets, this._sheet];
    }
    this._root = root;
  }

  disconnectedCallback() {
    const root = this._root;
    this._root = null;
    if (root) root.adoptedStyleSheets = root.adoptedStyleSheets.filter((s) => s !== this._sheet);
  }
}

const supported = typeof CSSStyleSheet === "function" &&
  typeof Element.prototype.attachShadow === "function" &&
  "adoptedStyleSheets" in Document.prototype &&
  "replaceSync" in CSSStyleSheet.prototype &&
  typeof customElements === "object";

if (supported && !customElements.get(STYLE_TAG)) customElements.define(STYLE_TAG, XtermStyle);

// create builds a terminal inside host, which should have a definite size
// (the terminal fills it). options go to xterm's Terminal as they are.
function create(host, options) {
  if (!host || typeof host.attachShadow !== "function") {
    throw new TypeError("AtelierXterm.create: host must be an element");
  }
  if (!supported) {
    throw new Error("AtelierXterm.create: this browser lacks constructable stylesheets or custom elements");
  }
  if (host.shadowRoot) {
    throw new Error("AtelierXterm.create: host already has a shadow root");
  }
  const root = host.attachShadow({ mode: "open" });
  root.adoptedStyleSheets = sheets().slice();
  const opts = options || {};
  const box = document.createElement("div");
  box.className = "box";
  box.style.backgroundColor = (opts.theme && opts.theme.background) || "#000";
  root.appendChild(box);

  const terminal = new Terminal(opts);
  const fitAddon = new FitAddon();
  terminal.loadAddon(fitAddon);
  terminal.open(box);

  let disposed = false;
  return {
    terminal,
    fit() {
      if (!disposed) fitAddon.fit();
    },
    proposeDimensions() {
      return disposed ? undefined : fitAddon.proposeDimensions();
    },
    dispose() {
      if (disposed) return;
      disposed = true;
      terminal.dispose();
      box.remove();
      root.adoptedStyleSheets = [];
    },
  };
}

window.AtelierXterm = Object.freeze({ create });
