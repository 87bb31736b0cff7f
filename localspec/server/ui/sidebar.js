// The sidebar: the stored conversations, and the speculation totals with the chart for the open one.

import { aggregate, chart } from './stats.js';

function button(className, text, title, disabled, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = className;
  b.textContent = text;
  b.title = title;
  b.disabled = disabled;
  b.addEventListener('click', onClick);
  return b;
}

// items: [{id, title}]; onOpen(id), onDelete(id)
export function renderList(list, items, currentId, { disabled, onOpen, onDelete }) {
  list.replaceChildren(
    ...items.map((c) => {
      const row = document.createElement('div');
      row.className = 'conv' + (c.id === currentId ? ' current' : '');
      const title = c.title || 'New chat';
      const del = button('conv-delete', '×', 'Delete this conversation', disabled, () => onDelete(c.id));
      del.setAttribute('aria-label', `Delete ${title}`);
      row.append(button('conv-open', title, title, disabled, () => c.id !== currentId && onOpen(c.id)), del);
      return row;
    }),
  );
}

export function renderTotals(chartBox, totals, messages) {
  const agg = aggregate(messages);
  chartBox.replaceChildren(chart(agg.byPos));
  totals.textContent = agg.replies
    ? [
        `${agg.replies} ${agg.replies === 1 ? 'reply' : 'replies'}`,
        `${agg.tokens} tokens`,
        agg.rate === null ? 'no drafts' : `${Math.round(agg.rate * 100)}% accepted`,
        agg.perPass === null ? null : `${agg.perPass.toFixed(2)} tokens/pass`,
      ].filter(Boolean).join(' · ')
    : 'Replies in this conversation will show here.';
}
