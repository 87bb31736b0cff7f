// Model text -> safe DOM: Markdown (marked), sanitised (DOMPurify), code highlighted (highlight.js),
// with the runs of drafted-and-accepted text wrapped in <span class="draft">.
//
// The draft runs survive Markdown by riding along as two private-use characters (ON/OFF) woven into
// the source; after rendering, a walk over the text nodes turns them into spans. A toggle is never
// put where it would change the Markdown: not in a line's block syntax (list bullets, '#', '>',
// fences) and not on a blank line; it waits for the next ordinary character.

import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';
import hljs from './vendor/highlight.min.js';

const ON = '\uE000';
const OFF = '\uE001';
const HAS_MARK = /[\uE000\uE001]/;
const ATTR_MARKS = /[\uE000\uE001]|%EE%80%8[01]/gi; // in an attribute, or percent-encoded in a link
const BLOCK_PREFIX = /^[ \t]*(?:(?:[-*+>|#=_~`]+|\d+[.)])[ \t]*)*/;
const FENCE = /^[ \t]*(?:`{3,}|~{3,})/;

marked.use({ gfm: true, breaks: false });

// An offline page: nothing that loads from elsewhere or restyles the page survives (the CSP would
// refuse it anyway, with an error in the console).
const PURIFY = {
  FORBID_TAGS: ['style', 'img', 'picture', 'video', 'audio', 'source', 'form', 'input', 'button', 'textarea', 'select', 'svg', 'math'],
  FORBID_ATTR: ['style'],
};
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

// runs: [[text, drafted], ...] -> Markdown source with ON/OFF around the drafted runs
export function weave(runs) {
  const text = runs.map((r) => r[0]).join('');
  const flags = new Uint8Array(text.length);
  let at = 0;
  for (const [t, d] of runs) {
    flags.fill(d ? 1 : 0, at, at + t.length);
    at += t.length;
  }
  let out = '';
  let state = 0;
  for (let start = 0; start < text.length; ) {
    const nl = text.indexOf('\n', start);
    const end = nl < 0 ? text.length : nl + 1;
    const line = text.slice(start, end);
    const skip = FENCE.test(line) ? line.length : line.match(BLOCK_PREFIX)[0].length;
    out += line.slice(0, skip);
    for (let i = start + skip; i < end; i++) {
      if (flags[i] !== state && text[i] !== '\n') {
        state = flags[i];
        out += state ? ON : OFF;
      }
      out += text[i];
    }
    start = end;
  }
  return out;
}

function highlight(root) {
  for (const code of root.querySelectorAll('pre > code')) {
    const lang = [...code.classList].find((c) => c.startsWith('language-'))?.slice(9);
    const text = code.textContent;
    const result =
      lang && hljs.getLanguage(lang)
        ? hljs.highlight(text, { language: lang, ignoreIllegals: true })
        : hljs.highlightAuto(text);
    code.innerHTML = result.value; // highlight.js escapes the text it wraps
    code.classList.add('hljs');
    if (lang) code.closest('pre').dataset.lang = lang;
  }
}

// ON/OFF characters -> <span class="draft">, in document order across elements
function paint(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let on = false;
  for (const node of nodes) {
    const text = node.nodeValue;
    if (!on && !HAS_MARK.test(text)) continue;
    const frag = document.createDocumentFragment();
    for (const piece of text.split(/([\uE000\uE001])/)) {
      if (piece === ON) on = true;
      else if (piece === OFF) on = false;
      else if (piece && on && piece.trim()) {
        const span = document.createElement('span');
        span.className = 'draft';
        span.textContent = piece;
        frag.append(span);
      } else if (piece) frag.append(piece);
    }
    node.replaceWith(frag);
  }
  for (const el of root.querySelectorAll('*')) {
    for (const attr of el.attributes) attr.value = attr.value.replace(ATTR_MARKS, '');
  }
}

// A fragment holding the rendered reply. The sanitiser runs last, over the finished markup: what
// paint() and highlight() change (marks taken out of an attribute turn `java\uE000script:` into
// `javascript:`) is checked like the rest. Until then the markup lives in a <template>, inert:
// nothing in it loads or runs.
export function renderMarkdown(runs) {
  const draft = document.createElement('template');
  draft.innerHTML = marked.parse(weave(runs), { async: false });
  paint(draft.content);
  highlight(draft.content);
  const template = document.createElement('template');
  template.innerHTML = DOMPurify.sanitize(draft.innerHTML, PURIFY);
  return template.content;
}

// Plain text, for copying and export
export const plain = (runs) => runs.map((r) => r[0]).join('');
