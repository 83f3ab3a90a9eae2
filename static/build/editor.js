// Entry point for static/vendor/codemirror.min.js (built by vendor.sh).
// It exposes one global, window.AtelierEditor, so the pages never need a
// module loader:
//
//   const ed = AtelierEditor.create(parentElement, {
//     doc: "file text", filename: "dir/name.go",
//     onSave() {}, onChange() {},
//   });
//   ed.getText(); ed.setText(text); ed.focus(); ed.setReadOnly(true); ed.destroy();
//   ed.where(); ed.goTo(ed.where());  // the cursor and the scroll, to keep
//
// Two things matter more than anything else here:
//
// Bytes. getText() returns exactly what create()/setText() were given until
// someone edits. CodeMirror normally splits lines on \n, \r\n and \r alike and
// joins them with \n, which would rewrite line endings; so the line separator
// is fixed to the one the file itself uses, and any other line-break
// character stays in the text as an ordinary (visibly marked) character.
//
// CSP. The page forbids inline <style> elements. style-mod, which CodeMirror
// uses for its CSS, only uses constructable style sheets (adoptedStyleSheets,
// which CSP does not restrict) inside a shadow root; in a plain document it
// adds a <style> element, which the policy blocks. So the editor lives in a
// shadow root attached to the parent element. Inherited properties (font,
// colour, CSS custom properties) still flow in from the page's stylesheet.

import { basicSetup } from "codemirror";
import { EditorState, Compartment, Prec } from "@codemirror/state";
import { EditorView, keymap } from "@codemirror/view";
import { indentWithTab } from "@codemirror/commands";
import { indentUnit, HighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { tags as t } from "@lezer/highlight";
import { javascript } from "@codemirror/lang-javascript";
import { python } from "@codemirror/lang-python";
import { go } from "@codemirror/lang-go";
import { html } from "@codemirror/lang-html";
import { css } from "@codemirror/lang-css";
import { json } from "@codemirror/lang-json";
import { markdown } from "@codemirror/lang-markdown";

const languages = {
  js: () => javascript(),
  mjs: () => javascript(),
  cjs: () => javascript(),
  jsx: () => javascript({ jsx: true }),
  ts: () => javascript({ typescript: true }),
  mts: () => javascript({ typescript: true }),
  cts: () => javascript({ typescript: true }),
  tsx: () => javascript({ jsx: true, typescript: true }),
  py: () => python(),
  pyi: () => python(),
  pyw: () => python(),
  go: () => go(),
  html: () => html(),
  htm: () => html(),
  gohtml: () => html(),
  tmpl: () => html(),
  svg: () => html(),
  css: () => css(),
  json: () => json(),
  webmanifest: () => json(),
  md: () => markdown(),
  markdown: () => markdown(),
};

// languageFor picks a language from the last extension of the file name;
// unknown extensions get plain text.
function languageFor(filename) {
  const base = String(filename || "").split("/").pop();
  const dot = base.lastIndexOf(".");
  if (dot <= 0) return [];
  const make = languages[base.slice(dot + 1).toLowerCase()];
  return make ? make() : [];
}

// lineSeparatorOf returns the line break the text mostly uses: \r\n, \n or
// (for old Mac files) \r. Text with no line break at all gets \n, which is
// what a new line typed into it will be.
function lineSeparatorOf(text) {
  let crlf = 0, lf = 0, cr = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 13) {
      if (text.charCodeAt(i + 1) === 10) { crlf++; i++; } else cr++;
    } else if (c === 10) {
      lf++;
    }
  }
  if (crlf === 0 && lf === 0 && cr === 0) return "\n";
  if (crlf >= lf && crlf >= cr) return "\r\n";
  return lf >= cr ? "\n" : "\r";
}

// indentOf guesses the indentation unit: a tab when lines mostly start with
// one (and always for Go), else the smallest run of leading spaces seen.
function indentOf(text, filename) {
  if (/\.go$/i.test(filename || "")) return "\t";
  let tabs = 0, spaces = 0, smallest = 0;
  const re = /(?:^|[\r\n])([ \t]+)\S/g;
  let m;
  let seen = 0;
  while ((m = re.exec(text)) !== null && seen < 2000) {
    seen++;
    const lead = m[1];
    if (lead[0] === "\t") { tabs++; continue; }
    if (/^ +$/.test(lead)) {
      spaces++;
      if (lead.length >= 2 && (smallest === 0 || lead.length < smallest)) smallest = lead.length;
    }
  }
  if (tabs > spaces) return "\t";
  if (smallest >= 2 && smallest <= 8) return " ".repeat(smallest);
  return /\.(py|pyi|pyw)$/i.test(filename || "") ? "    " : "  ";
}

// The editor fills its parent: all of a parent with a fixed height (the
// text then scrolls inside), else at least the parent's min-height (growing
// with the text). min-height: inherit carries the parent's value down to the
// content so a click anywhere in the box lands in the editor. (The gutter
// column sizes itself to the text; a fixed height looks best.)
//
// Colours come from CSS custom properties (--cm-*), which inherit into the
// shadow root, so the page's stylesheet gives the editor its light and dark
// looks by prefers-color-scheme; the fallbacks are CodeMirror's own light
// colours. The selectors name .cm-editor and a parent once more than
// CodeMirror's base theme does, whose light rules are one class stronger
// than a plain theme rule.
const theme = EditorView.theme({
  "&": {
    height: "100%", minHeight: "inherit",
    backgroundColor: "var(--cm-background, #fff)", color: "var(--cm-text, #000)",
  },
  ".cm-scroller": { overflow: "auto", minHeight: "inherit" },
  ".cm-content": { minHeight: "inherit" },
  // The page marks the editor's pane; a dotted line around the text adds nothing.
  "&.cm-editor.cm-focused": { outline: "none" },
  "&.cm-editor .cm-scroller .cm-content": { caretColor: "var(--cm-cursor, #000)" },
  "&.cm-editor .cm-cursorLayer .cm-cursor, &.cm-editor .cm-cursorLayer .cm-dropCursor": { borderLeftColor: "var(--cm-cursor, #000)" },
  "&.cm-editor .cm-scroller .cm-gutters": {
    backgroundColor: "var(--cm-gutter, #f5f5f5)", color: "var(--cm-gutter-text, #6c6c6c)",
    borderRightColor: "var(--cm-border, #ddd)",
  },
  "&.cm-editor .cm-content .cm-activeLine": { backgroundColor: "var(--cm-active-line, #cceeff44)" },
  "&.cm-editor .cm-gutters .cm-activeLineGutter": { backgroundColor: "var(--cm-active-gutter, #e2f2ff)" },
  "&.cm-editor.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, &.cm-editor > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, &.cm-editor .cm-content ::selection": {
    backgroundColor: "var(--cm-selection, #d7d4f0)",
  },
  "&.cm-editor .cm-panels": { backgroundColor: "var(--cm-gutter, #f5f5f5)", color: "var(--cm-text, #000)" },
  "&.cm-editor .cm-tooltip": { backgroundColor: "var(--cm-gutter, #f5f5f5)", color: "var(--cm-text, #000)", borderColor: "var(--cm-border, #bbb)" },
});

// palette colours the syntax by the same custom properties.
const palette = HighlightStyle.define([
  { tag: [t.keyword, t.modifier, t.controlKeyword, t.operatorKeyword, t.definitionKeyword, t.moduleKeyword], color: "var(--cm-keyword, #708)" },
  { tag: [t.string, t.special(t.string), t.regexp, t.character], color: "var(--cm-string, #a11)" },
  { tag: [t.comment, t.lineComment, t.blockComment, t.docComment], color: "var(--cm-comment, #940)", fontStyle: "italic" },
  { tag: [t.number, t.bool, t.atom, t.null], color: "var(--cm-number, #164)" },
  { tag: [t.definition(t.variableName), t.function(t.definition(t.variableName)), t.definition(t.propertyName)], color: "var(--cm-definition, #00f)" },
  { tag: [t.typeName, t.className, t.namespace, t.standard(t.typeName)], color: "var(--cm-type, #085)" },
  { tag: [t.propertyName, t.attributeName, t.labelName], color: "var(--cm-property, #05a)" },
  { tag: [t.tagName, t.angleBracket], color: "var(--cm-tag, #170)" },
  { tag: [t.meta, t.processingInstruction], color: "var(--cm-meta, #555)" },
  { tag: t.heading, fontWeight: "bold", color: "var(--cm-heading, inherit)" },
  { tag: t.link, textDecoration: "underline", color: "var(--cm-link, #00c)" },
  { tag: t.url, color: "var(--cm-link, #00c)" },
  { tag: t.emphasis, fontStyle: "italic" },
  { tag: t.strong, fontWeight: "bold" },
  { tag: t.strikethrough, textDecoration: "line-through" },
  { tag: t.invalid, color: "var(--cm-invalid, #f00)" },
]);

// create builds an editor inside parent. See the comment at the top.
function create(parent, options) {
  if (!parent || typeof parent.appendChild !== "function") {
    throw new TypeError("AtelierEditor.create: parent must be an element");
  }
  const opts = options || {};
  const filename = String(opts.filename || "");
  const onSave = typeof opts.onSave === "function" ? opts.onSave : null;
  const onChange = typeof opts.onChange === "function" ? opts.onChange : null;

  // Inside a shadow root style-mod uses adoptedStyleSheets (see top).
  let root = parent;
  if (typeof parent.attachShadow === "function" &&
      typeof CSSStyleSheet === "function" && "adoptedStyleSheets" in Document.prototype) {
    root = parent.shadowRoot || parent.attachShadow({ mode: "open" });
  }

  const editable = new Compartment();
  let changeTimer = 0;
  let destroyed = false;
  let readOnly = false;

  function editableExtensions() {
    return [EditorState.readOnly.of(readOnly), EditorView.editable.of(!readOnly)];
  }

  function stateFor(text) {
    const sep = lineSeparatorOf(text);
    return EditorState.create({
      doc: text,
      extensions: [
        EditorState.lineSeparator.of(sep),
        // Pasted or dropped text takes the file's own line breaks.
        EditorView.clipboardInputFilter.of((t) => t.replace(/\r\n?|\n/g, sep)),
        Prec.highest(keymap.of([{
          key: "Mod-s",
          preventDefault: true,
          run: () => { if (onSave) onSave(); return true; },
        }])),
        basicSetup,
        keymap.of([indentWithTab]),
        indentUnit.of(indentOf(text, filename)),
        languageFor(filename),
        theme,
        syntaxHighlighting(palette),
        editable.of(editableExtensions()),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged || !onChange) return;
          clearTimeout(changeTimer);
          changeTimer = setTimeout(() => { if (!destroyed) onChange(); }, 120);
        }),
      ],
    });
  }

  const view = new EditorView({
    state: stateFor(typeof opts.doc === "string" ? opts.doc : ""),
    parent: root,
    root: root === parent ? undefined : root,
  });

  return {
    // getText returns the document with the file's own line breaks.
    getText() { return view.state.sliceDoc(); },
    // setText replaces the whole document (and its undo history), picking
    // the line separator afresh. It does not call onChange.
    setText(text) {
      clearTimeout(changeTimer);
      view.setState(stateFor(String(text)));
    },
    focus() { view.focus(); },
    // where tells where the person is in the text, for the page to keep:
    // the selection's anchor and head (offsets into the text) and how far
    // the text is scrolled, in CSS pixels.
    where() {
      const s = view.state.selection.main;
      return { anchor: s.anchor, head: s.head, top: view.scrollDOM.scrollTop, left: view.scrollDOM.scrollLeft };
    },
    // goTo puts the selection and the scroll back where where() found
    // them. Offsets past the end of the text (it may have changed since)
    // stop at its end. The scroll is set again once the editor has
    // measured itself, which it does only while it is shown.
    goTo(at) {
      const len = view.state.doc.length;
      const offset = (n) => Math.min(Math.max(0, Math.floor(Number(n) || 0)), len);
      view.dispatch({ selection: { anchor: offset(at && at.anchor), head: offset(at && at.head) } });
      const top = Math.max(0, Number(at && at.top) || 0);
      const left = Math.max(0, Number(at && at.left) || 0);
      const scroll = () => { view.scrollDOM.scrollTop = top; view.scrollDOM.scrollLeft = left; };
      scroll();
      view.requestMeasure({ read() {}, write: scroll });
    },
    // setReadOnly(true) stops all editing (e.g. when the session ended).
    setReadOnly(flag) {
      readOnly = !!flag;
      view.dispatch({ effects: editable.reconfigure(editableExtensions()) });
    },
    destroy() {
      if (destroyed) return;
      destroyed = true;
      clearTimeout(changeTimer);
      view.destroy();
    },
  };
}

window.AtelierEditor = Object.freeze({ create });
