// The two dialogs: the API key prompt and the settings form (request fields kept in store.js).

import { setApiKey } from './api.js';
import { DEFAULT_SETTINGS } from './store.js';

const $ = (id) => document.getElementById(id);
let keyPrompt = null;

// Ask for an API key; resolves true when one was entered. One dialog at a time.
export function askKey(reason) {
  const dialog = $('key-dialog');
  const input = $('key-input');
  keyPrompt ??= new Promise((resolve) => {
    $('key-reason').textContent = reason;
    input.value = '';
    dialog.addEventListener(
      'close',
      () => {
        keyPrompt = null;
        const key = input.value.trim();
        const ok = dialog.returnValue === 'ok' && key !== '';
        if (ok) setApiKey(key, $('key-remember').checked);
        resolve(ok);
      },
      { once: true },
    );
    dialog.returnValue = '';
    dialog.showModal();
  });
  return keyPrompt;
}

// Show the settings; resolves the new settings on Save, null on Cancel
export function editSettings(settings) {
  const dialog = $('settings-dialog');
  const f = $('settings-form').elements;
  for (const [k, v] of Object.entries(settings)) if (f[k]) f[k].value = v;
  const kField = () => (f.draft_k.disabled = f.draft_mode.value !== 'fixed');
  kField();
  f.draft_mode.onchange = kField;
  return new Promise((resolve) => {
    dialog.addEventListener(
      'close',
      () => {
        if (dialog.returnValue !== 'save') return resolve(null);
        const out = {};
        for (const k of Object.keys(DEFAULT_SETTINGS)) out[k] = f[k].value.trim();
        out.draft_k = Math.max(1, Math.round(Number(out.draft_k) || 4));
        resolve(out);
      },
      { once: true },
    );
    dialog.returnValue = '';
    dialog.showModal();
  });
}
