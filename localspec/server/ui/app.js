// The chat page: state, events and the one streaming loop. The wire is api.js, a reply's model
// reply.js, its DOM render.js (Markdown in markdown.js), the sidebar sidebar.js, the dialogs
// dialogs.js, storage store.js.

import { ApiError, forgetApiKey, health, loadModel, models, streamChat } from './api.js';
import { attachments } from './attach.js';
import { askKey, editSettings } from './dialogs.js';
import { download, fileName, toMarkdown } from './export.js';
import { plain } from './markdown.js';
import { renderEditor, renderMessage } from './render.js';
import { applyChunk, newReply, requestBody } from './reply.js';
import { renderList as renderSidebarList, renderTotals } from './sidebar.js';
import * as store from './store.js';

const $ = (id) => document.getElementById(id);
const ui = {
  messages: $('messages'), scroller: $('scroller'), empty: $('empty'), title: $('title'),
  input: $('input'), send: $('send'), stop: $('stop'), composer: $('composer'),
  list: $('conversations'), newChat: $('new-chat'), chart: $('chart'), totals: $('totals'),
  status: $('server-status'), model: $('model-name'), banner: $('banner'), bannerText: $('banner-text'),
  picker: $('model-picker'), pickerBox: $('model-picker-box'),
  system: $('system'), systemPreview: $('system-preview'), showDrafts: $('show-drafts'),
  theme: $('theme-toggle'), attach: $('attach'), attachFile: $('attach-file'),
};
const images = attachments($('attachments'), (text) => showBanner(text));

const state = {
  conv: null,
  ctrl: null, // the AbortController of the reply streaming now
  model: null,
  editing: null, // index of the user message being edited
  settings: store.loadSettings(),
  prefs: store.loadPrefs(),
};
const busy = () => state.ctrl !== null;

// -- theme and draft colouring ---------------------------------------------------------------------
const systemDark = matchMedia('(prefers-color-scheme: dark)');
const theme = () => state.prefs.theme || (systemDark.matches ? 'dark' : 'light');

function applyPrefs() {
  document.documentElement.dataset.theme = theme();
  ui.theme.textContent = theme() === 'dark' ? 'Light' : 'Dark';
  document.body.classList.toggle('hide-drafts', !state.prefs.showDrafts);
  ui.showDrafts.checked = state.prefs.showDrafts;
}

// -- the server ----------------------------------------------------------------------------------
const KEY_NEEDED = 'This server needs an API key (it was started with --api-key or LOCALSPEC_API_KEY).';
const KEY_WRONG = 'That key was refused. Enter the key the server was started with.';

// Run fn, asking for a key (and trying again) while the server answers 401
async function withKey(fn) {
  for (let tries = 0; ; tries++) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401) || tries >= 5) throw e;
      if (!(await askKey(tries ? KEY_WRONG : KEY_NEEDED))) throw e;
    }
  }
}

function setStatus(kind, text) {
  ui.status.dataset.state = kind;
  ui.model.textContent = text;
}

function showBanner(text) {
  ui.bannerText.textContent = text;
  ui.banner.hidden = !text;
}

async function connect() {
  setStatus('checking', 'connecting…');
  try {
    await health();
  } catch (e) {
    setStatus('down', 'server unreachable');
    showBanner(`${e.message} Start it, then retry.`);
    return;
  }
  showBanner('');
  try {
    const list = (await withKey(models)).data;
    const loaded = list.find((m) => m.status?.value === 'loaded');
    const kept = list.find((m) => m.id === state.prefs.model);
    state.model = (kept || loaded || list[0])?.id || 'model';
    showModels(list);
    setStatus('up', state.model);
  } catch (e) {
    setStatus(e.status === 401 ? 'locked' : 'down', e.status === 401 ? 'API key needed' : e.message);
  }
}

// -- the model picker: shown when the server serves several models (router mode) --------------------
function showModels(list) {
  ui.pickerBox.hidden = list.length < 2;
  ui.picker.replaceChildren(
    ...list.map((m) => {
      const state = m.status?.value || 'loaded';
      const option = new Option(`${m.id} · ${state}`, m.id);
      option.dataset.state = state;
      if (m.status?.error) option.title = m.status.error;
      return option;
    }),
  );
  ui.picker.value = state.model;
}

async function refreshModels() {
  if (ui.pickerBox.hidden) return;
  try {
    showModels((await withKey(models)).data);
  } catch {
    // the next reply or choice says what is wrong
  }
}

// Choose a model; one not loaded is loaded now, so the first reply does not wait for it
async function pickModel(name) {
  state.model = name;
  state.prefs.model = name;
  store.savePrefs(state.prefs);
  if (ui.picker.selectedOptions[0]?.dataset.state === 'loaded') return setStatus('up', name);
  setStatus('checking', `loading ${name}…`);
  ui.picker.disabled = true;
  try {
    await withKey(() => loadModel(name));
    setStatus('up', name);
    showBanner('');
  } catch (e) {
    setStatus('down', `${name}: not loaded`);
    showBanner(e instanceof ApiError ? errorMessage(e) : String(e));
  } finally {
    ui.picker.disabled = false;
    refreshModels();
  }
}

// -- conversations ---------------------------------------------------------------------------------
function openConversation(conv) {
  state.conv = conv;
  state.editing = null;
  store.setCurrentId(conv.id);
  renderAll();
}

function startNew() {
  if (!busy()) openConversation(store.newConversation(state.conv?.system || ''));
}

let saveTimer = null;
function save(soon = false) {
  clearTimeout(saveTimer);
  if (soon) saveTimer = setTimeout(() => save(), 1000);
  else if (state.conv.messages.length && !store.saveConversation(state.conv)) {
    showBanner('The browser refused to store this conversation (storage full or disabled): it will not survive a reload.');
  }
}

function errorMessage(e) {
  if (e.status === 503 && e.retryAfter) return `${e.message} (the server asks to retry after ${e.retryAfter} s)`;
  if (e.status === 401) return `${e.message}. Open Settings to forget the stored key, or reload to enter one.`;
  return e.message;
}

// Stream a reply to the conversation as it stands
async function generate() {
  const conv = state.conv;
  const body = requestBody(conv, state.settings, ui.pickerBox.hidden ? null : state.model);
  const msg = newReply(body);
  conv.messages.push(msg);
  state.ctrl = new AbortController();
  const { signal } = state.ctrl;
  renderAll();
  try {
    await withKey(async () => {
      for await (const chunk of streamChat(body, signal)) {
        applyChunk(msg, chunk);
        renderLive();
        save(true);
      }
    });
    msg.reasoningDone = true;
  } catch (e) {
    if (e.name === 'AbortError') msg.stopped = true;
    else {
      if (!msg.content && !msg.reasoning && !msg.tool_calls) conv.messages.pop();
      else msg.stopped = true;
      const status = e instanceof ApiError ? e.status : 0;
      conv.messages.push({ role: 'error', content: e instanceof ApiError ? errorMessage(e) : String(e), status, retryAfter: e.retryAfter ?? null });
      if (status === 0) connect();
    }
  } finally {
    state.ctrl = null;
    save();
    if (state.conv === conv) renderAll();
    refreshModels(); // a router may have loaded this model and unloaded another
  }
}

function send(text, pictures = []) {
  const conv = state.conv;
  conv.messages.push(pictures.length ? { role: 'user', content: text, images: pictures } : { role: 'user', content: text });
  if (!conv.title) conv.title = text.split('\n')[0].slice(0, 60) || 'Image';
  generate();
}

// Drop the trailing reply (and any error after it), answer again
function regenerate() {
  const msgs = state.conv.messages;
  while (msgs.length && msgs[msgs.length - 1].role !== 'user') msgs.pop();
  if (msgs.length) generate();
  else renderAll();
}

// -- rendering -------------------------------------------------------------------------------------
const nearBottom = () => ui.scroller.scrollHeight - ui.scroller.scrollTop - ui.scroller.clientHeight < 80;

function renderConversation() {
  const conv = state.conv;
  const stick = nearBottom();
  const n = conv.messages.length;
  const frag = document.createDocumentFragment();
  conv.messages.forEach((m, i) => {
    const box = renderMessage(m, i, { last: i === n - 1, busy: busy(), live: busy() && i === n - 1 });
    if (i === state.editing) box.querySelector('.text').replaceWith(renderEditor(m));
    frag.append(box);
  });
  ui.messages.replaceChildren(frag);
  ui.empty.hidden = n > 0;
  ui.title.textContent = conv.title || 'New chat';
  if (ui.system.value !== conv.system) ui.system.value = conv.system;
  ui.systemPreview.textContent = conv.system ? `· ${conv.system.slice(0, 60)}` : '· none';
  ui.send.hidden = busy();
  ui.stop.hidden = !busy();
  ui.newChat.disabled = busy();
  renderTotals(ui.chart, ui.totals, conv.messages);
  if (stick) ui.scroller.scrollTop = ui.scroller.scrollHeight;
  ui.messages.querySelector('.editor textarea')?.focus();
}

let frame = 0;
function renderLive() {
  frame ||= requestAnimationFrame(() => {
    frame = 0;
    const n = state.conv.messages.length;
    const old = ui.messages.querySelector(`[data-index="${n - 1}"]`);
    if (!old || !busy()) return;
    const stick = nearBottom();
    const box = renderMessage(state.conv.messages[n - 1], n - 1, { last: true, busy: true, live: true });
    if (old.querySelector('.reasoning')?.open) box.querySelector('.reasoning').open = true; // the reader opened it
    old.replaceWith(box);
    if (stick) ui.scroller.scrollTop = ui.scroller.scrollHeight;
  });
}

function renderList() {
  const items = store.listConversations();
  const current = state.conv;
  if (!items.some((c) => c.id === current.id)) items.unshift({ id: current.id, title: current.title });
  renderSidebarList(ui.list, items, current.id, {
    disabled: busy(),
    onOpen: (id) => openConversation(store.loadConversation(id) || store.newConversation()),
    onDelete: (id) => {
      store.deleteConversation(id);
      if (id !== current.id) return renderList();
      const next = store.listConversations()[0];
      openConversation((next && store.loadConversation(next.id)) || store.newConversation());
    },
  });
}

function renderAll() {
  renderConversation();
  renderList();
}

// -- events ----------------------------------------------------------------------------------------
function submitInput() {
  const text = ui.input.value.trim();
  if ((!text && !images.count) || busy()) return;
  ui.input.value = '';
  growInput();
  send(text, images.take());
}

function growInput() {
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 240)}px`;
}

function copy(text) {
  navigator.clipboard?.writeText(text).catch(() => {});
}

function onMessageClick(ev) {
  const action = ev.target.closest('[data-action]')?.dataset.action;
  if (!action || busy()) return;
  const box = ev.target.closest('.message');
  const index = Number(box.dataset.index);
  const msg = state.conv.messages[index];
  if (action === 'copy') copy(msg.role === 'assistant' ? plain(msg.runs || []) : msg.content);
  else if (action === 'regenerate') regenerate();
  else if (action === 'edit') {
    state.editing = index;
    renderConversation();
  } else if (action === 'cancel-edit') {
    state.editing = null;
    renderConversation();
  }
}

function onEditSubmit(ev) {
  if (!ev.target.matches('.editor')) return;
  ev.preventDefault();
  const text = ev.target.querySelector('textarea').value.trim();
  const index = state.editing;
  if (!text || index === null || busy()) return;
  state.editing = null;
  state.conv.messages[index].content = text;
  state.conv.messages.length = index + 1; // what came after answered the old text
  if (index === 0) state.conv.title = text.split('\n')[0].slice(0, 60);
  generate();
}

function wire() {
  ui.composer.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submitInput();
  });
  ui.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      submitInput();
    }
  });
  ui.input.addEventListener('input', growInput);
  ui.attach.addEventListener('click', () => ui.attachFile.click());
  ui.attachFile.addEventListener('change', () => {
    images.add([...ui.attachFile.files]);
    ui.attachFile.value = ''; // the same file may be picked again
  });
  ui.input.addEventListener('paste', (ev) => {
    const files = [...(ev.clipboardData?.files || [])];
    if (!files.length) return; // text pastes as usual
    ev.preventDefault();
    images.add(files);
  });
  ui.composer.addEventListener('dragover', (ev) => ev.preventDefault());
  ui.composer.addEventListener('drop', (ev) => {
    ev.preventDefault();
    images.add([...(ev.dataTransfer?.files || [])]);
  });
  ui.stop.addEventListener('click', () => state.ctrl?.abort());
  ui.newChat.addEventListener('click', startNew);
  ui.messages.addEventListener('click', onMessageClick);
  ui.messages.addEventListener('submit', onEditSubmit);
  ui.system.addEventListener('input', () => {
    state.conv.system = ui.system.value;
    ui.systemPreview.textContent = state.conv.system ? `· ${state.conv.system.slice(0, 60)}` : '· none';
    save(true);
  });
  ui.showDrafts.addEventListener('change', () => {
    state.prefs.showDrafts = ui.showDrafts.checked;
    store.savePrefs(state.prefs);
    applyPrefs();
  });
  ui.theme.addEventListener('click', () => {
    state.prefs.theme = theme() === 'dark' ? 'light' : 'dark';
    store.savePrefs(state.prefs);
    applyPrefs();
  });
  systemDark.addEventListener('change', applyPrefs);
  $('banner-retry').addEventListener('click', connect);
  ui.picker.addEventListener('change', () => pickModel(ui.picker.value));
  ui.picker.addEventListener('focus', refreshModels);
  $('open-settings').addEventListener('click', async () => {
    const settings = await editSettings(state.settings);
    if (settings) store.saveSettings((state.settings = settings));
  });
  $('forget-key').addEventListener('click', () => {
    forgetApiKey();
    $('settings-dialog').close();
    connect();
  });
  $('export-md').addEventListener('click', () => {
    download(fileName(state.conv, 'md'), toMarkdown(state.conv, state.model), 'text/markdown');
    $('export-menu').open = false;
  });
  $('export-json').addEventListener('click', () => {
    download(fileName(state.conv, 'json'), JSON.stringify(state.conv, null, 2), 'application/json');
    $('export-menu').open = false;
  });
  // a reload or a closed tab mid-reply keeps what has arrived
  addEventListener('pagehide', () => state.conv && save());
}

function init() {
  applyPrefs();
  const id = store.currentId();
  const conv = (id && store.loadConversation(id)) || store.newConversation();
  const last = conv.messages[conv.messages.length - 1];
  if (last?.role === 'assistant' && !last.timings) last.stopped = true; // the page went away mid-reply
  wire();
  openConversation(conv);
  ui.input.focus();
  connect();
}

init();
