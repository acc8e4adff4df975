// Encodes texts with Hugging Face's own `tokenizers` (Rust, Node bindings) for check_tokenizer.py.
//
//   node tools/train/hf_encode.js TOKENIZER_JSON TEXTS_JSON     # TEXTS_JSON: a JSON array of strings
//
// Prints {"plain": [[ids]...], "special": [[ids]...]}: encode(text) without and with special
// tokens. It resolves `tokenizers` from tests/tokenizer/reference/node_modules (installed by
// scripts/test.sh). It must only report what the library does: no post-processing.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tests', 'tokenizer', 'reference',
                                         'node_modules', 'tokenizers'));

async function main() {
  const [tokenizerPath, textsPath] = process.argv.slice(2);
  if (!tokenizerPath || !textsPath) {
    console.error('usage: node hf_encode.js TOKENIZER_JSON TEXTS_JSON');
    process.exit(2);
  }
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
  const plain = [], special = [];
  for (const text of texts) {
    plain.push((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
    special.push((await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds());
  }
  process.stdout.write(JSON.stringify({ plain, special }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
