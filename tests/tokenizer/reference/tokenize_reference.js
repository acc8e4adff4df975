// Prints Hugging Face `tokenizers` (the Rust library's Node bindings) results for a corpus, as JSON.
//
//   node tokenize_reference.js TOKENIZER_JSON CORPUS_FILE
//
// For each line of CORPUS_FILE (split on "\n" only, so "\r" stays part of a line), plus the whole
// file as one text, it prints encode(text, add_special_tokens) for both flag values, and
// decode(ids, skip_special_tokens) for both flag values of the ids encoded with special tokens.
// It must only report what the reference library does: no post-processing of its answers.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokenizerPath, corpusPath] = process.argv.slice(2);
  if (!tokenizerPath || !corpusPath) {
    console.error('usage: node tokenize_reference.js TOKENIZER_JSON CORPUS_FILE');
    process.exit(2);
  }
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const corpus = fs.readFileSync(corpusPath, 'utf8');
  const texts = corpus.split('\n');
  if (texts.length > 0 && texts[texts.length - 1] === '') texts.pop();
  texts.push(corpus);
  const out = [];
  for (const text of texts) {
    const plain = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
    const special = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
    out.push({
      text,
      ids: plain,
      ids_with_special: special,
      decoded: await tokenizer.decode(special, false),
      decoded_skip_special: await tokenizer.decode(special, true),
    });
  }
  process.stdout.write(JSON.stringify({ vocab_size: tokenizer.getVocabSize(true), cases: out }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
