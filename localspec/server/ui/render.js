// One message -> its DOM, one function per part. Model and user text only ever reach the page as
// text nodes or as sanitised Markdown (markdown.js): never as HTML that runs.

import { renderMarkdown } from './markdown.js';
import { statItems } from './stats.js';

function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, action, title = label) {
  const b = h('button', 'link', label);
  b.type = 'button';
  b.dataset.action = action;
  b.title = title;
  return b;
}

// -- parts ----------------------------------------------------------------------------------------
export function renderUserText(msg) {
  const text = h('div', 'text user-text', msg.content); // textContent: typed HTML stays text
  if (!msg.images?.length) return text;
  const pictures = h('div', 'user-images');
  msg.images.forEach((url, i) => {
    const img = h('img');
    img.src = url; // a data URL the page read from a file: img-src allows data: only for this
    img.alt = `image ${i + 1}`;
    pictures.append(img);
  });
  text.prepend(pictures);
  return text;
}

export function renderReasoning(msg) {
  if (!msg.reasoning) return null;
  const box = h('details', 'reasoning');
  box.append(h('summary', null, msg.reasoningDone ? 'Reasoning' : 'Reasoning…'));
  box.append(h('div', 'reasoning-text', msg.reasoning));
  return box;
}

export function renderContent(msg) {
  const body = h('div', 'text markdown');
  body.append(renderMarkdown(msg.runs || []));
  return body;
}

export function renderToolCalls(msg) {
  if (!msg.tool_calls?.length) return null;
  const list = h('div', 'tool-calls');
  for (const call of msg.tool_calls) {
    const card = h('div', 'tool-call');
    const head = h('div', 'tool-call-head');
    head.append(h('span', 'tool-call-kind', 'tool call'), h('code', 'tool-call-name', call.function?.name || '?'));
    let args = call.function?.arguments || '';
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      // still streaming, or not JSON: show it as it came
    }
    card.append(head, h('pre', 'tool-call-args', args));
    list.append(card);
  }
  return list;
}

export function renderStats(msg) {
  const line = h('div', 'stats');
  if (msg.stopped) line.append(h('span', 'stat flag', 'stopped'));
  for (const [value, label, title] of statItems(msg)) {
    const item = h('span', 'stat');
    item.title = title;
    item.append(h('b', null, value));
    if (label) item.append(` ${label}`);
    if (value === 'fell back') item.classList.add('flag');
    if (value === 'cut at max tokens') item.classList.add('note');
    line.append(item);
  }
  return line.childElementCount ? line : null;
}

export function renderError(msg) {
  const box = h('div', 'text error-text');
  box.append(h('strong', null, msg.status ? `Error ${msg.status}` : 'Server unreachable'), h('span', null, msg.content));
  return box;
}

// -- a whole message ------------------------------------------------------------------------------
const ROLE = { user: 'You', assistant: 'Assistant', error: 'Error' };

// last: the conversation's last message (it gets regenerate); busy: a reply is streaming
export function renderMessage(msg, index, { last, busy, live }) {
  const box = h('article', `message ${msg.role}`);
  box.dataset.index = index;
  if (live) box.classList.add('live');
  const head = h('div', 'message-head');
  head.append(h('span', 'role', ROLE[msg.role]));
  const actions = h('span', 'actions');
  if (!busy) {
    if (msg.role === 'user') actions.append(button('Edit', 'edit', 'Edit this message and answer again'));
    if (msg.role !== 'error') actions.append(button('Copy', 'copy'));
    if (last && msg.role === 'assistant') actions.append(button('Regenerate', 'regenerate', 'Answer the last message again'));
    if (last && msg.role === 'error') actions.append(button('Retry', 'regenerate', 'Send the last message again'));
  }
  head.append(actions);
  box.append(head);
  if (msg.role === 'user') box.append(renderUserText(msg));
  else if (msg.role === 'error') box.append(renderError(msg));
  else {
    for (const part of [renderReasoning(msg), renderContent(msg), renderToolCalls(msg), renderStats(msg)]) {
      if (part) box.append(part);
    }
    if (live && !msg.runs?.length && !msg.reasoning) box.querySelector('.markdown').append(h('span', 'typing', 'Thinking'));
  }
  return box;
}

// The editor that replaces a user message's text while it is being edited
export function renderEditor(msg) {
  const form = h('form', 'editor');
  const area = h('textarea');
  area.value = msg.content;
  area.rows = Math.min(12, Math.max(2, msg.content.split('\n').length));
  const row = h('div', 'editor-actions');
  const save = h('button', 'button primary', 'Save & send');
  save.type = 'submit';
  const cancel = button('Cancel', 'cancel-edit');
  cancel.className = 'button';
  row.append(cancel, save);
  form.append(area, row);
  return form;
}
