// What the page keeps in the browser (localStorage): conversations, one key each plus an index,
// so saving one does not rewrite them all; the request settings; the page's preferences.
//
// A conversation: {id, title, system, created, updated, messages: [...]}, where a message is
//   {role: 'user', content, images: [data URL, ...] (only when it has any)}
//   {role: 'assistant', content, runs: [[text, drafted 0|1], ...], reasoning, tool_calls, timings,
//    finish, stopped, asked: {draft_max, ...}}
//   {role: 'error', content, status, retryAfter}   (shown, never sent to the model)

const INDEX = 'localspec.conversations';
const CONV = 'localspec.conversation.';
const CURRENT = 'localspec.current';
const SETTINGS = 'localspec.settings';
const PREFS = 'localspec.prefs';

function read(key, fallback) {
  try {
    const raw = localStorage.getItem(key);
    return raw === null ? fallback : JSON.parse(raw);
  } catch {
    return fallback; // storage off or a value we cannot read: start clean rather than break
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false; // full or disabled: the page still works, it just forgets on reload
  }
}

export function newConversation(system = '') {
  const now = Date.now();
  return { id: `c${now.toString(36)}${Math.random().toString(36).slice(2, 7)}`, title: '', system, created: now, updated: now, messages: [] };
}

// [{id, title, updated}], newest first
export function listConversations() {
  return read(INDEX, []).sort((a, b) => b.updated - a.updated);
}

export function loadConversation(id) {
  return read(CONV + id, null);
}

export function saveConversation(conv) {
  conv.updated = Date.now();
  const ok = write(CONV + conv.id, conv);
  const index = read(INDEX, []).filter((c) => c.id !== conv.id);
  index.push({ id: conv.id, title: conv.title, updated: conv.updated });
  write(INDEX, index);
  return ok;
}

export function deleteConversation(id) {
  localStorage.removeItem(CONV + id);
  write(INDEX, read(INDEX, []).filter((c) => c.id !== id));
}

export const currentId = () => read(CURRENT, null);
export const setCurrentId = (id) => write(CURRENT, id);

export const DEFAULT_SETTINGS = { temperature: '', max_tokens: '', draft_mode: '', draft_k: 4, spec_mode: '', lookup: '' };
export const loadSettings = () => ({ ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) });
export const saveSettings = (s) => write(SETTINGS, s);

// Page preferences: theme ('light' | 'dark' | null to follow the system), showDrafts
export const loadPrefs = () => ({ theme: null, showDrafts: true, ...read(PREFS, {}) });
export const savePrefs = (p) => write(PREFS, p);
