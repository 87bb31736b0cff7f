// A conversation as a file: Markdown for people, JSON (the stored object, draft runs and timings
// included) for tools.

import { statItems } from './stats.js';

export function toMarkdown(conv, model) {
  const out = [`# ${conv.title || 'Conversation'}`, '', `_localspec${model ? ` · ${model}` : ''} · ${new Date(conv.updated).toISOString()}_`, ''];
  if (conv.system) out.push('## System', '', conv.system, '');
  for (const m of conv.messages) {
    if (m.role === 'user') {
      out.push('## User', '');
      for (const [i, url] of (m.images || []).entries()) out.push(`![image ${i + 1}](${url})`, ''); // inline: the file stands alone
      out.push(m.content, '');
    }
    else if (m.role === 'assistant') {
      out.push('## Assistant', '', m.content, '');
      const stats = statItems(m).map(([v, l]) => (l ? `${v} ${l}` : v));
      if (m.stopped) stats.unshift('stopped');
      if (stats.length) out.push(`_${stats.join(' · ')}_`, '');
    } else out.push(`> **Error${m.status ? ` ${m.status}` : ''}:** ${m.content}`, '');
  }
  return out.join('\n');
}

export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function fileName(conv, ext) {
  const slug = (conv.title || 'conversation').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 40);
  return `localspec-${slug || 'conversation'}.${ext}`;
}
