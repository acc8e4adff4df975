#include "common/text_file.h"

#include <fstream>
#include <sstream>

#include "common/status.h"

namespace baton {

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(str_cat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(str_cat(path, ": read error"));
  return ss.str();
}

}  // namespace baton
