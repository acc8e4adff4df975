// Hugging Face `tokenizers` (Rust, through its Node bindings) on the same input as
// tokenizer_bench.cc: the corpus file as one text, encoded --repeat times after one warm-up.
// Run with RAYON_NUM_THREADS=1 (tokenizer_bench.sh does) so it uses one thread.
//
//   node tokenizer_bench_hf.js TOKENIZER_JSON CORPUS_FILE REPEAT
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'tests', 'tokenizer', 'reference',
                                        'node_modules', 'tokenizers'));

async function main() {
  const [tokenizerPath, corpusPath, repeatArg] = process.argv.slice(2);
  const repeat = Number(repeatArg || 200);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const text = fs.readFileSync(corpusPath, 'utf8');
  const tokens = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getLength();
  const start = process.hrtime.bigint();
  let total = 0;
  for (let r = 0; r < repeat; ++r) {
    total += (await tokenizer.encode(text, null, { addSpecialTokens: false })).getLength();
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const bytes = Buffer.byteLength(text, 'utf8');
  console.log(JSON.stringify({ implementation: 'hf-tokenizers', tokens_per_call: tokens, calls: repeat, seconds,
                               tokens_per_s: total / seconds, bytes_per_s: bytes * repeat / seconds }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
