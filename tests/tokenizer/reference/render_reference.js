// Renders chat templates with @huggingface/jinja (Hugging Face's JS chat-template renderer), as JSON.
//
//   node render_reference.js CASES_JSON
//
// CASES_JSON: {"templates": {name: template_text}, "conversations": [conversation, ...],
//              "variables": {name: {bos_token, eos_token, ...}}}
// A conversation is [message, ...], or {"messages": [message, ...], "tools": [tool, ...]}.
// Prints {"renders": [{"template", "conversation", "add_generation_prompt", "text" | "error"}]}
// for every template × conversation × add_generation_prompt. Variables are passed exactly as
// transformers' apply_chat_template passes them (messages, add_generation_prompt, special tokens).
'use strict';
const fs = require('fs');

async function main() {
  const { Template } = await import('@huggingface/jinja');
  const casesPath = process.argv[2];
  if (!casesPath) {
    console.error('usage: node render_reference.js CASES_JSON');
    process.exit(2);
  }
  const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  const renders = [];
  for (const [name, text] of Object.entries(cases.templates)) {
    const template = new Template(text);
    const variables = cases.variables[name] || {};
    cases.conversations.forEach((conversation, index) => {
      const messages = Array.isArray(conversation) ? conversation : conversation.messages;
      const tools = Array.isArray(conversation) ? undefined : conversation.tools;
      for (const addGenerationPrompt of [false, true]) {
        const entry = { template: name, conversation: index, add_generation_prompt: addGenerationPrompt };
        try {
          const context = { ...variables, messages, add_generation_prompt: addGenerationPrompt };
          if (tools !== undefined && tools.length > 0) context.tools = tools;
          entry.text = template.render(context);
        } catch (e) {
          entry.error = String(e.message || e);
        }
        renders.push(entry);
      }
    });
  }
  process.stdout.write(JSON.stringify({ renders }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
