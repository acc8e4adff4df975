// `baton tokenize`: the model's tokenizer on the command line. Reads stdin line by line and
// prints one JSON line per input line: token ids (no BOS or other special tokens added), or with
// --decode, the text of a JSON array of ids as a JSON string.
//
// Exit codes: 0 ok, 1 the tokenizer could not be loaded, 2 bad flags or a malformed input line.
#pragma once

namespace baton::cli {

// argv[0] is "tokenize"; the rest are its flags.
int tokenize_main(int argc, char** argv);

}  // namespace baton::cli
