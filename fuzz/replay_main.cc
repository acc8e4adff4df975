// The replay driver: a main() for the fuzz harnesses without libFuzzer, so that an ordinary (g++)
// build runs every seed through its harness as a ctest test (fuzz_replay.<name>).
//
//   <name>_replay PATH...   each PATH a file, or a directory whose regular files run in name order
//
// Prints one line per PATH and exits 0 when every input ran (a harness that finds a bug aborts,
// as under libFuzzer). Fails when a PATH is missing or a directory holds no file: a test that ran
// nothing must not pass. LLVMFuzzerInitialize runs first when the harness defines it.
//
// Must not: mutate or generate inputs (that is libFuzzer's job), or skip a file.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  // A copy of exactly the file's bytes, in a buffer of its own (so ASan sees reads past the end).
  std::vector<std::uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  for (int i = 1; i < argc; ++i) {
    const fs::path path(argv[i]);
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) {
        std::fprintf(stderr, "replay: %s has no input files\n", path.c_str());
        return 1;
      }
      for (const fs::path& file : files) {
        if (!run_file(file)) return 1;
      }
      std::printf("replay: %zu inputs of %s ran\n", files.size(), path.c_str());
    } else if (fs::is_regular_file(path, ec)) {
      if (!run_file(path)) return 1;
      std::printf("replay: %s ran\n", path.c_str());
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
