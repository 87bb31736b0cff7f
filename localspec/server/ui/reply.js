// A reply as the page keeps it, built from the stream: the request for a conversation, and each
// streamed chunk folded into the message (text runs with their draft flag, reasoning, tool calls,
// the closing timings). No DOM here.

// A message's content: its text, or its images (image_url parts, data URLs) then its text
function content(m) {
  if (!m.images?.length) return m.content;
  const parts = m.images.map((url) => ({ type: 'image_url', image_url: { url } }));
  return m.content ? [...parts, { type: 'text', text: m.content }] : parts;
}

// The chat request for a conversation as it stands; settings fields left empty are not sent, so the
// server's own defaults apply
export function requestBody(conv, s, model = null) {
  const messages = [];
  if (conv.system.trim()) messages.push({ role: 'system', content: conv.system });
  for (const m of conv.messages) if (m.role === 'user' || m.role === 'assistant') messages.push({ role: m.role, content: content(m) });
  const body = { messages, stream: true, stream_options: { include_usage: true }, localspec: { mark_drafts: true } };
  if (model) body.model = model;
  if (s.temperature !== '') body.temperature = Number(s.temperature);
  if (s.max_tokens !== '') body.max_tokens = Number(s.max_tokens);
  if (s.draft_mode === 'auto') body.draft_max = 'auto';
  else if (s.draft_mode === 'fixed') body.draft_max = Number(s.draft_k);
  if (s.spec_mode) body.spec_mode = s.spec_mode;
  if (s.lookup) body.lookup = s.lookup;
  return body;
}

export const newReply = (body) => ({ role: 'assistant', content: '', runs: [], asked: { draft_max: body.draft_max ?? null } });

function addText(msg, text, drafted) {
  msg.content += text;
  const last = msg.runs[msg.runs.length - 1];
  if (last && last[1] === drafted) last[0] += text;
  else msg.runs.push([text, drafted]);
}

// tool_calls deltas arrive in pieces keyed by index: the name once, the arguments in fragments
function addToolCalls(msg, deltas) {
  msg.tool_calls ??= [];
  for (const d of deltas) {
    const call = (msg.tool_calls[d.index ?? msg.tool_calls.length] ??= { id: d.id, type: 'function', function: { name: '', arguments: '' } });
    if (d.id) call.id = d.id;
    if (d.function?.name) call.function.name += d.function.name;
    if (d.function?.arguments) call.function.arguments += d.function.arguments;
  }
}

// One streamed chunk into the reply. A chunk's text is marked drafted when all its tokens were
// accepted drafts (`localspec.all_draft`; a chunk is usually one token).
export function applyChunk(msg, chunk) {
  if (chunk.model) msg.model = chunk.model; // which model answered (a router serves several)
  if (chunk.timings) msg.timings = chunk.timings;
  const choice = chunk.choices?.[0];
  if (!choice) return;
  const d = choice.delta || {};
  if (d.reasoning_content) msg.reasoning = (msg.reasoning || '') + d.reasoning_content;
  if (d.content) {
    if (msg.reasoning) msg.reasoningDone = true;
    addText(msg, d.content, chunk.localspec?.all_draft ? 1 : 0);
  }
  if (d.tool_calls) addToolCalls(msg, d.tool_calls);
  if (choice.finish_reason) msg.finish = choice.finish_reason;
}
