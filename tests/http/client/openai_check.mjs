// Drives baton-router's HTTP API with the official `openai` client (pinned in package.json) and
// prints what it got as one line: `RESULT [{"text", "finish_reason", "usage", "chunks",
// "tool_calls"}, ...]`.
//   node openai_check.mjs BASE_URL API_KEY CASES_JSON
// CASES_JSON: [{"kind": "completion" | "chat", "stream": bool, "params": {...}}, ...]; params are
// passed to client.completions.create / client.chat.completions.create as they are. A streamed
// chat with "helper": true is read with the client's own accumulator (chat.completions.stream(),
// finalChatCompletion()), which checks each tool call's id, type and name as it rebuilds them.
import OpenAI from 'openai';

const [baseURL, apiKey, casesJson] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

async function run(c) {
  const api = c.kind === 'chat' ? client.chat.completions : client.completions;
  const params = { ...c.params, stream: c.stream };
  if (c.kind === 'chat' && c.stream && c.helper) {
    delete params.stream;
    const stream = client.chat.completions.stream(params);
    let chunks = 0;
    stream.on('chunk', () => { chunks += 1; });
    const r = await stream.finalChatCompletion();
    const choice = r.choices[0];
    return { object: 'chat.completion.chunk', text: choice.message.content, finish_reason: choice.finish_reason,
             usage: r.usage ?? null, chunks, tool_calls: choice.message.tool_calls ?? null };
  }
  if (!c.stream) {
    const r = await api.create(params);
    const choice = r.choices[0];
    return {
      object: r.object,
      text: c.kind === 'chat' ? choice.message.content : choice.text,
      finish_reason: choice.finish_reason,
      usage: r.usage,
      tool_calls: c.kind === 'chat' ? choice.message.tool_calls ?? null : null,
    };
  }
  const out = { object: null, text: '', finish_reason: null, usage: null, chunks: 0, role: null };
  for await (const chunk of await api.create(params)) {
    out.chunks += 1;
    out.object = chunk.object;
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (c.kind === 'chat') {
        if (choice.delta.role) out.role = choice.delta.role;
        out.text += choice.delta.content ?? '';
      } else {
        out.text += choice.text;
      }
      if (choice.finish_reason) out.finish_reason = choice.finish_reason;
    }
  }
  return out;
}

const results = [];
for (const c of JSON.parse(casesJson)) {
  try {
    results.push(await run(c));
  } catch (e) {
    results.push({ error: String(e), status: e.status ?? null });
  }
}
console.log('RESULT ' + JSON.stringify(results));
