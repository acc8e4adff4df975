#include "engine/spec/hidden_states_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

constexpr std::size_t kMaxStem = 160;  // leaves room for the hash, the suffix and a temporary's decorations

bool plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == '~';
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::string errno_text(int e) { return std::strerror(e); }

// pwrite until done (a regular file may still return short counts, e.g. near a quota).
absl::Status write_all(int fd, const void* data, std::size_t bytes, std::int64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(str_cat("extract_hidden_states: writing ", path, ": ", errno_text(errno)));
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

std::string hidden_states_file_name(std::string_view request_id) {
  std::string stem;
  bool changed = request_id.empty() || request_id.size() > kMaxStem;
  for (const char c : request_id.substr(0, kMaxStem)) {
    const bool ok = plain_char(c) && !(stem.empty() && c == '.');
    stem.push_back(ok ? c : '_');
    changed |= !ok;
  }
  if (changed) {
    char hash[20];
    std::snprintf(hash, sizeof(hash), "-%016llx", static_cast<unsigned long long>(fnv1a(request_id)));
    stem += hash;
  }
  return stem + ".safetensors";
}

absl::StatusOr<HiddenStatesFile> HiddenStatesFile::create(const std::string& dir, const std::string& file_name,
                                                          std::span<const std::int32_t> token_ids,
                                                          std::int32_t num_layers, std::int32_t hidden) {
  HiddenStatesFile f;
  f.path_ = dir + "/" + file_name;
  f.num_tokens_ = static_cast<std::int32_t>(token_ids.size());
  f.row_floats_ = static_cast<std::int64_t>(num_layers) * hidden;
  const auto n = static_cast<std::int64_t>(token_ids.size());
  const std::int64_t ids_bytes = n * 8;
  const std::int64_t states_bytes = n * f.row_floats_ * 4;
  nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"token_ids", {{"dtype", "I64"}, {"shape", {n}}, {"data_offsets", {0, ids_bytes}}}},
      {"hidden_states",
       {{"dtype", "F32"}, {"shape", {n, num_layers, hidden}}, {"data_offsets", {ids_bytes, ids_bytes + states_bytes}}}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  f.data_start_ = 8 + static_cast<std::int64_t>(text.size()) + ids_bytes;

  // A name no other writer uses (O_EXCL), hidden until renamed.
  std::random_device entropy;
  for (int attempt = 0; attempt < 8 && f.fd_ < 0; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof(suffix), ".%08x.tmp", static_cast<unsigned>(entropy()));
    f.temp_path_ = dir + "/." + file_name + suffix;
    f.fd_ = ::open(f.temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f.fd_ < 0 && errno != EEXIST) break;
  }
  if (f.fd_ < 0) {
    const int e = errno;
    f.temp_path_.clear();
    return absl::InternalError(str_cat("extract_hidden_states: cannot create a file in ", dir, ": ", errno_text(e)));
  }
  std::vector<char> head(8 + text.size() + static_cast<std::size_t>(ids_bytes));
  const auto len = static_cast<std::uint64_t>(text.size());
  for (int i = 0; i < 8; ++i) head[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  std::memcpy(head.data() + 8, text.data(), text.size());
  for (std::int64_t t = 0; t < n; ++t) {
    const auto v = static_cast<std::int64_t>(token_ids[static_cast<std::size_t>(t)]);
    std::memcpy(head.data() + 8 + text.size() + static_cast<std::size_t>(t) * 8, &v, 8);  // little-endian hosts
  }
  BATON_RETURN_IF_ERROR(write_all(f.fd_, head.data(), head.size(), 0, f.temp_path_));
  // The full size now, so that a full disk shows up here rather than half-way through the prompt.
  if (const int e = ::posix_fallocate(f.fd_, 0, static_cast<off_t>(f.data_start_ + states_bytes)); e != 0) {
    if (e != EINVAL && e != EOPNOTSUPP) {
      return absl::InternalError(str_cat("extract_hidden_states: reserving ", f.data_start_ + states_bytes,
                                         " bytes for ", f.temp_path_, ": ", errno_text(e)));
    }
    if (::ftruncate(f.fd_, static_cast<off_t>(f.data_start_ + states_bytes)) != 0) {
      return absl::InternalError(str_cat("extract_hidden_states: sizing ", f.temp_path_, ": ", errno_text(errno)));
    }
  }
  return f;
}

HiddenStatesFile::HiddenStatesFile(HiddenStatesFile&& other) noexcept { *this = std::move(other); }

HiddenStatesFile& HiddenStatesFile::operator=(HiddenStatesFile&& other) noexcept {
  if (this != &other) {
    discard();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    temp_path_ = std::exchange(other.temp_path_, std::string());
    data_start_ = other.data_start_;
    num_tokens_ = other.num_tokens_;
    row_floats_ = other.row_floats_;
    finished_ = other.finished_;
  }
  return *this;
}

HiddenStatesFile::~HiddenStatesFile() { discard(); }

void HiddenStatesFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

absl::Status HiddenStatesFile::write_rows(std::int32_t first, std::int32_t count, std::span<const float> rows) {
  if (fd_ < 0 || first < 0 || count < 0 || first + count > num_tokens_ ||
      rows.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(row_floats_)) {
    return absl::InternalError(str_cat("extract_hidden_states: ", count, " rows from position ", first, " (",
                                       rows.size(), " floats) do not fit ", path_, " (", num_tokens_, " positions of ",
                                       row_floats_, " floats)", fd_ < 0 ? ", which is closed" : ""));
  }
  return write_all(fd_, rows.data(), rows.size_bytes(), data_start_ + static_cast<std::int64_t>(first) * row_floats_ * 4,
                   temp_path_);
}

absl::Status HiddenStatesFile::finish() {
  if (fd_ < 0) return absl::InternalError(str_cat("extract_hidden_states: ", path_, " is not open"));
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) return absl::InternalError(str_cat("extract_hidden_states: closing ", temp_path_, ": ", errno_text(errno)));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(str_cat("extract_hidden_states: renaming ", temp_path_, " to ", path_, ": ",
                                       errno_text(errno)));
  }
  temp_path_.clear();
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace baton
