#include "tokenizer/chat_template_arg.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "common/status.h"

namespace baton {
namespace {

constexpr std::uintmax_t kMaxTemplateFileBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> chat_template_from_arg(const std::string& arg) {
  if (arg.empty()) return absl::InvalidArgumentError("--chat-template is empty: give a file or a template");
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    const std::uintmax_t size = std::filesystem::file_size(arg, ec);
    if (ec) return absl::InvalidArgumentError(str_cat("--chat-template ", arg, ": cannot read it: ", ec.message()));
    if (size > kMaxTemplateFileBytes) {
      return absl::InvalidArgumentError(
          str_cat("--chat-template ", arg, ": ", size, " bytes; a chat template file may hold at most ",
                  kMaxTemplateFileBytes));
    }
    std::ifstream in(arg, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) return absl::InvalidArgumentError(str_cat("--chat-template ", arg, ": cannot read it"));
    return text;
  }
  if (arg.find_first_of("{\n") != std::string::npos) return arg;
  return absl::InvalidArgumentError(str_cat("--chat-template ", arg,
                                            ": no such file (and not a template: it has no '{')"));
}

}  // namespace baton
