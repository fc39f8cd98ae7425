"use strict";
// A small, safe Markdown renderer for the model's answers: every piece of text is HTML-escaped before any
// markup is added, and the markup added is fixed (no links, no raw HTML, no attributes from the text but a
// code block's language, reduced to [\w+-]). Handles code fences (also unclosed, while streaming), inline
// code, bold, italic, headings, lists and paragraphs.
const Markdown = (() => {
  const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const escape = (s) => s.replace(/[&<>"']/g, (c) => entities[c]);

  // inline renders one line's inline code, bold and italic.
  function inline(text) {
    return text.split(/(`[^`\n]+`)/).map((part, i) => {
      if (i % 2 === 1) return "<code>" + escape(part.slice(1, -1)) + "</code>";
      return escape(part)
        .replace(/\*\*(?=\S)(.+?)\*\*/g, "<strong>$1</strong>")
        .replace(/(^|[^*\w])\*(?=[^\s*])(.+?)\*(?!\w)/g, "$1<em>$2</em>")
        .replace(/(^|[^_\w])_(?=[^\s_])(.+?)_(?!\w)/g, "$1<em>$2</em>");
    }).join("");
  }

  // blocks renders text without code fences: headings, lists and paragraphs.
  function blocks(text) {
    const out = [];
    let para = [];
    let list = null;
    const flush = () => {
      if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
      para = [];
      if (list) out.push(`<${list.tag}>` + list.items.map((it) => "<li>" + inline(it) + "</li>").join("") + `</${list.tag}>`);
      list = null;
    };
    for (const line of text.split("\n")) {
      let m;
      if (!line.trim()) {
        flush();
      } else if ((m = /^\s{0,3}(#{1,6})\s+(.*)$/.exec(line))) {
        flush();
        out.push(`<h${m[1].length}>` + inline(m[2]) + `</h${m[1].length}>`);
      } else if ((m = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line))) {
        const tag = /\d/.test(m[1]) ? "ol" : "ul";
        if (para.length || (list && list.tag !== tag)) flush();
        if (!list) list = { tag, items: [] };
        list.items.push(m[2]);
      } else if (list && /^\s+\S/.test(line)) {
        list.items[list.items.length - 1] += " " + line.trim();
      } else {
        if (list) flush();
        para.push(line);
      }
    }
    flush();
    return out.join("");
  }

  function pre(code) {
    const lang = code.lang.replace(/[^\w+-]/g, "");
    const label = lang ? `<span class="lang">${lang}</span>` : "";
    return `<pre>${label}<code${lang ? ` class="lang-${lang}"` : ""}>` + escape(code.lines.join("\n")) + "</code></pre>";
  }

  // render turns Markdown text into HTML.
  function render(text) {
    const out = [];
    let prose = [];
    let code = null;
    for (const line of text.split("\n")) {
      if (code === null && /^\s*```/.test(line)) {
        out.push(blocks(prose.join("\n")));
        prose = [];
        code = { lang: line.trim().slice(3).trim(), lines: [] };
      } else if (code !== null && /^\s*```\s*$/.test(line)) {
        out.push(pre(code));
        code = null;
      } else {
        (code ? code.lines : prose).push(line);
      }
    }
    out.push(code ? pre(code) : blocks(prose.join("\n")));
    return out.join("");
  }

  return { render, escape };
})();

if (typeof module === "object") module.exports = Markdown; // node, for the tests
