// An answer's markdown rendered (marked), sanitised (DOMPurify) and highlighted
// (highlight.js), then each token's text wrapped in a span carrying its source.
import hljs from "./vendor/highlight/core.min.js";
import bash from "./vendor/highlight/languages/bash.min.js";
import c from "./vendor/highlight/languages/c.min.js";
import cpp from "./vendor/highlight/languages/cpp.min.js";
import css from "./vendor/highlight/languages/css.min.js";
import diff from "./vendor/highlight/languages/diff.min.js";
import go from "./vendor/highlight/languages/go.min.js";
import java from "./vendor/highlight/languages/java.min.js";
import javascript from "./vendor/highlight/languages/javascript.min.js";
import json from "./vendor/highlight/languages/json.min.js";
import markdown from "./vendor/highlight/languages/markdown.min.js";
import plaintext from "./vendor/highlight/languages/plaintext.min.js";
import python from "./vendor/highlight/languages/python.min.js";
import rust from "./vendor/highlight/languages/rust.min.js";
import shell from "./vendor/highlight/languages/shell.min.js";
import sql from "./vendor/highlight/languages/sql.min.js";
import typescript from "./vendor/highlight/languages/typescript.min.js";
import xml from "./vendor/highlight/languages/xml.min.js";
import yaml from "./vendor/highlight/languages/yaml.min.js";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, plaintext, python, rust, shell,
                    sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

export const SOURCE_NAMES = {
  target: "written by the target", ngram: "n-gram lookup in the prompt", suffix: "suffix match in the history store",
  draft: "draft model", hybrid: "draft model and n-gram lookup", prediction: "predicted output",
  grammar: "grammar-forced", heads: "learned heads",
};
// how far ahead in the raw text a rendered character is looked for (markdown drops its syntax)
const LOOKAHEAD = 200;

function copyButton(pre) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.addEventListener("click", async () => {
    const text = pre.querySelector("code")?.textContent ?? pre.textContent;
    try { await navigator.clipboard.writeText(text); } catch {
      const area = Object.assign(document.createElement("textarea"), { value: text });
      document.body.append(area); area.select(); document.execCommand("copy"); area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  pre.append(button);
}

const NEAR = 4; // within a text node, characters follow each other in the raw text but for escapes

function find(raw, ch, from, reach) {
  const end = Math.min(raw.length, from + reach);
  for (let j = from; j < end; j++) if (raw[j] === ch) return j;
  return -1;
}

// Where a rendered text node starts in the raw text: its first characters, found within
// LOOKAHEAD of the last match (what lies between is markdown's syntax: "## ", "1. **", a link).
function anchor(raw, text, from) {
  const probe = text.slice(0, 12);
  const j = raw.slice(from, from + LOOKAHEAD + probe.length).indexOf(probe);
  return j >= 0 ? from + j : -1;
}

// Each rendered text node is anchored in the raw text, then its characters matched in
// order; runs of characters of one token become one span. Whitespace between blocks is
// the renderer's own and is left alone.
function markTokens(root, raw, owner, marks) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let at = 0;
  for (const node of nodes) {
    const text = node.data;
    if (!text.trim()) continue;
    const start = anchor(raw, text, at);
    if (start >= 0) at = start;
    const pieces = [];
    let from = 0, token = -1;
    const close = (end) => {
      if (end > from) pieces.push([text.slice(from, end), token]);
      from = end;
    };
    for (let i = 0; i < text.length; i++) {
      const j = find(raw, text[i], at, start >= 0 || i > 0 ? NEAR : LOOKAHEAD);
      const t = j >= 0 ? owner[j] : -1;
      if (t >= 0) at = j + 1;
      if (t !== token) { close(i); token = t; }
    }
    close(text.length);
    if (pieces.length === 1 && pieces[0][1] < 0) continue;
    const fragment = document.createDocumentFragment();
    for (const [piece, t] of pieces) {
      if (t < 0) { fragment.append(piece); continue; }
      const span = document.createElement("span");
      span.className = "tok";
      span.dataset.source = marks[t].source;
      span.dataset.token = t;
      span.textContent = piece;
      fragment.append(span);
    }
    node.replaceWith(fragment);
  }
}

// The raw text's owner token per character, from the marks (whose texts make up the text).
export function owners(marks) {
  const owner = [];
  marks.forEach((m, i) => { for (let k = 0; k < m.text.length; k++) owner.push(i); });
  return owner;
}

export function renderAnswer(body, text, marks) {
  const html = window.marked.parse(text, { gfm: true, breaks: false });
  body.innerHTML = window.DOMPurify.sanitize(html);
  for (const code of body.querySelectorAll("pre code")) {
    const lang = [...code.classList].find((k) => k.startsWith("language-"))?.slice(9);
    if (lang && hljs.getLanguage(lang)) {
      code.innerHTML = hljs.highlight(code.textContent, { language: lang, ignoreIllegals: true }).value;
      code.classList.add("hljs");
    }
  }
  if (marks && marks.length) {
    const joined = marks.map((m) => m.text).join("");
    if (joined === text) markTokens(body, text, owners(marks), marks);
  }
  for (const pre of body.querySelectorAll("pre")) copyButton(pre);
}

export function tooltipText(mark) {
  const lines = [`${mark.source}: ${SOURCE_NAMES[mark.source] || "drafted"}`];
  if (mark.logprob !== undefined) lines.push(`log-probability ${mark.logprob.toFixed(3)}`);
  if (mark.runner_up) lines.push(`runner-up ${JSON.stringify(mark.runner_up.text)} ${mark.runner_up.logprob.toFixed(3)}`);
  return lines.join("\n");
}
