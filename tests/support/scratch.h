// Scratch paths for tests: the directories a test writes (cluster logs, a model copy with a chat
// template, a tokenizer copy) under the temp directory, named <name>-<pid>. They are removed when
// the test program ends with every test passed, and kept when one failed (or BATON_KEEP_LOGS is
// set), with their paths on stderr: a failing serving test's process logs are what its reader
// needs. ctest runs one test case per process, so in practice each case cleans up after itself.
// Not for files a test removes itself as soon as it has read them.
#pragma once

#include <filesystem>
#include <string>

namespace baton::testing {

// temp_directory_path() / "<name>-<pid>" (not created), registered for removal at the program's end.
std::filesystem::path scratch_path(const std::string& name);

}  // namespace baton::testing
