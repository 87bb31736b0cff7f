// The speculation figures: one line per reply (from the stream's `timings`, llama.cpp's keys plus
// ours), and the acceptance-by-draft-position chart over a whole conversation.

const SVG = 'http://www.w3.org/2000/svg';
const pct = (x) => `${Math.round(x * 100)}%`;
const num = (x, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '–');

// "K auto 2–6" / "K 4" / "no draft": the K asked for, or the range the rounds used. A fixed K shows
// smaller rounds too near max tokens, so a range alone does not mean auto.
export function kPolicy(t, asked) {
  if (!t.speculative) return 'no draft';
  const ks = t.k_history.filter((k) => k > 0);
  const lo = Math.min(...ks);
  const hi = Math.max(...ks);
  const span = !ks.length ? '0' : lo === hi ? `${lo}` : `${lo}–${hi}`;
  if (typeof asked?.draft_max === 'number') return `K ${asked.draft_max}`;
  if (asked?.draft_max === 'auto') return `K auto ${span}`;
  const top = ks.filter((k) => k === hi).length;
  return top >= 0.75 * ks.length ? `K ${hi}` : `K ${span}`; // the server's fixed K, trimmed at the end

}

// [[value, label, title], ...] for the stats line of one finished reply
export function statItems(msg) {
  const t = msg.timings;
  if (!t) return [];
  const items = [
    [`${t.predicted_n}`, 'tokens', `${t.predicted_n} generated after a ${t.prompt_n}-token prompt (${Math.round(t.prompt_ms)} ms)`],
    [num(t.predicted_per_second), 'tok/s', 'decode speed, from the first generated token on'],
  ];
  if (t.speculative) {
    items.push(
      [pct(t.acceptance_rate), 'accepted', `${t.draft_n_accepted} of ${t.draft_n} drafted tokens accepted by the target`],
      [num(t.tokens_per_round, 2), 'tokens/pass', 'tokens emitted per target pass (accepted drafts + the target’s own)'],
    );
  }
  const ks = t.k_history.filter((k) => k > 0);
  const meanK = ks.length ? ks.reduce((a, b) => a + b, 0) / ks.length : 0;
  items.push([kPolicy(t, msg.asked), '', `tokens drafted per round (K): ${meanK.toFixed(1)} on average over ${ks.length} rounds`]);
  if (t.fell_back) items.push(['fell back', '', 'drafting was losing time, so the tuner switched to plain decoding']);
  if (msg.model) items.push([msg.model, '', 'the model (pair) that answered']);
  if (msg.finish === 'length') items.push(['cut at max tokens', '', 'the reply reached max tokens (Settings)']);
  return items;
}

// Conversation totals and acceptance per draft position. The stream gives per-position rates; the
// rounds that drafted at position i are counted from k_history (K asked per round), to weight them.
export function aggregate(messages) {
  const acc = [];
  const drafted = [];
  let replies = 0;
  let tokens = 0;
  let nDraft = 0;
  let nAcc = 0;
  let passes = 0;
  for (const m of messages) {
    const t = m.role === 'assistant' && m.timings;
    if (!t) continue;
    replies += 1;
    tokens += t.predicted_n;
    nDraft += t.draft_n;
    nAcc += t.draft_n_accepted;
    passes += t.tokens_per_round > 0 ? t.predicted_n / t.tokens_per_round : 0;
    t.acceptance_by_pos.forEach((rate, i) => {
      const rounds = t.k_history.filter((k) => k > i).length || 1;
      acc[i] = (acc[i] || 0) + rate * rounds;
      drafted[i] = (drafted[i] || 0) + rounds;
    });
  }
  const byPos = drafted.map((d, i) => ({ pos: i + 1, rate: acc[i] / d, rounds: d }));
  return { replies, tokens, rate: nDraft ? nAcc / nDraft : null, perPass: passes ? tokens / passes : null, byPos };
}

function el(name, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

// An inline SVG bar chart: one bar per draft position, its height the acceptance rate there
export function chart(byPos) {
  const W = 248;
  const H = 132;
  const left = 30;
  const top = 14;
  const bottom = 20;
  const plotH = H - top - bottom;
  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, class: 'accept-chart', role: 'img' });
  svg.append(el('title', {}, 'Acceptance by draft position'));
  for (const level of [0, 0.5, 1]) {
    const y = top + plotH * (1 - level);
    svg.append(el('line', { x1: left, x2: W, y1: y, y2: y, class: level ? 'grid' : 'axis' }));
    svg.append(el('text', { x: left - 6, y: y + 3.5, class: 'tick', 'text-anchor': 'end' }, pct(level)));
  }
  if (!byPos.length) {
    svg.append(el('text', { x: (left + W) / 2, y: top + plotH / 2, class: 'none', 'text-anchor': 'middle' }, 'no drafts yet'));
    return svg;
  }
  const slot = (W - left) / byPos.length;
  const bar = Math.min(26, slot * 0.7);
  for (const { pos, rate, rounds } of byPos) {
    const x = left + slot * (pos - 1) + (slot - bar) / 2;
    const h = Math.max(plotH * rate, 1);
    const rect = el('rect', { x, y: top + plotH - h, width: bar, height: h, rx: 2, class: 'bar' });
    rect.append(el('title', {}, `position ${pos}: ${pct(rate)} accepted (${rounds} rounds)`));
    svg.append(rect);
    if (byPos.length <= 10) {
      svg.append(el('text', { x: x + bar / 2, y: top + plotH - h - 3, class: 'value', 'text-anchor': 'middle' }, pct(rate)));
    }
    svg.append(el('text', { x: x + bar / 2, y: H - 6, class: 'tick', 'text-anchor': 'middle' }, `${pos}`));
  }
  return svg;
}
