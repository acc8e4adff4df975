// What the fuzz harnesses share: a property check that aborts (so libFuzzer, or the replay driver,
// reports the input), a private scratch directory for parsers that only read files, and a UTF-8
// check.
//
// Must not: be linked into product code, or hide a failure (every violated property aborts).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace baton::fuzz {

[[noreturn]] inline void property_failed(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

// A property of the code under test (not an input filter): false means a bug was found.
#define FUZZ_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) ::baton::fuzz::property_failed(__FILE__, __LINE__, #cond); \
  } while (0)

// A directory of this process's own under $TMPDIR (or /tmp), removed at exit. Parsers that take a
// path (Tokenizer::load, SafetensorsFile::open) read the input from a file written here.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/baton-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) property_failed(__FILE__, __LINE__, "mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

  // Replaces dir/name with exactly `bytes`; returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string file = path_ + "/" + name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) property_failed(__FILE__, __LINE__, "cannot write the scratch file");
    return file;
  }

 private:
  std::string path_;
};

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace baton::fuzz
