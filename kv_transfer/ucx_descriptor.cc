// Encoding and decoding of the UCX receiver descriptor (ucx_descriptor.h). Must not: read past
// the input or allocate from an unchecked length.
#include "kv_transfer/ucx_descriptor.h"


#include "common/status.h"

namespace baton::kv {
namespace {

constexpr std::string_view kMagic = "BUCX";
// Generous limits: a UCX worker address is a few hundred bytes, a packed rkey tens to hundreds.
constexpr std::uint32_t kMaxBlobBytes = 1u << 16;
constexpr std::uint32_t kMaxNameBytes = 256;
constexpr std::uint32_t kMaxPools = 16;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_blob(std::string& out, std::string_view blob) {
  put_u32(out, static_cast<std::uint32_t>(blob.size()));
  out.append(blob);
}

// Reads fields front to back; every failure names the field.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}

  absl::StatusOr<std::uint64_t> fixed(std::string_view field, int size) {
    if (rest_.size() < static_cast<std::size_t>(size)) {
      return absl::InvalidArgumentError(str_cat("ucx descriptor: truncated at ", field, " (", size,
                                                " bytes needed, ", rest_.size(), " left)"));
    }
    std::uint64_t v = 0;
    for (int i = 0; i < size; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(rest_[i])) << (8 * i);
    }
    rest_.remove_prefix(size);
    return v;
  }

  absl::StatusOr<std::string> blob(std::string_view field, std::uint32_t max_bytes) {
    BATON_ASSIGN_OR_RETURN(std::uint64_t len, fixed(str_cat(field, " length"), 4));
    if (len > max_bytes) {
      return absl::InvalidArgumentError(
          str_cat("ucx descriptor: ", field, " length ", len, " exceeds the limit of ", max_bytes));
    }
    if (len > rest_.size()) {
      return absl::InvalidArgumentError(str_cat("ucx descriptor: ", field, " length ", len,
                                                " exceeds the ", rest_.size(), " bytes left"));
    }
    std::string out(rest_.substr(0, len));
    rest_.remove_prefix(len);
    return out;
  }

  absl::Status expect_magic() {
    if (rest_.substr(0, kMagic.size()) != kMagic) {
      return absl::InvalidArgumentError(
          "ucx descriptor: magic is not \"BUCX\" (not a UCX descriptor; another transport's?)");
    }
    rest_.remove_prefix(kMagic.size());
    return absl::OkStatus();
  }

  std::size_t left() const { return rest_.size(); }

 private:
  std::string_view rest_;
};

}  // namespace

std::string encode_ucx_descriptor(const UcxDescriptor& descriptor) {
  std::string out(kMagic);
  put_u32(out, kUcxDescriptorVersion);
  put_blob(out, descriptor.worker_address);
  put_u32(out, static_cast<std::uint32_t>(descriptor.pools.size()));
  for (const UcxRemotePool& pool : descriptor.pools) {
    put_blob(out, pool.name);
    put_u64(out, pool.base);
    put_u64(out, pool.bytes);
    put_blob(out, pool.rkey);
  }
  put_u32(out, descriptor.shm ? 1 : 0);
  if (descriptor.shm) {
    put_blob(out, descriptor.shm->worker_address);
    for (const std::string& rkey : descriptor.shm->rkeys) put_blob(out, rkey);
  }
  return out;
}

absl::StatusOr<UcxDescriptor> decode_ucx_descriptor(std::string_view bytes) {
  Reader in(bytes);
  BATON_RETURN_IF_ERROR(in.expect_magic());
  BATON_ASSIGN_OR_RETURN(std::uint64_t version, in.fixed("version", 4));
  if (version != kUcxDescriptorVersion) {
    return absl::InvalidArgumentError(str_cat("ucx descriptor: version ", version,
                                              " is not supported (this build reads version ",
                                              kUcxDescriptorVersion, ")"));
  }
  UcxDescriptor out;
  BATON_ASSIGN_OR_RETURN(out.worker_address, in.blob("worker address", kMaxBlobBytes));
  if (out.worker_address.empty()) {
    return absl::InvalidArgumentError("ucx descriptor: worker address is empty");
  }
  BATON_ASSIGN_OR_RETURN(std::uint64_t num_pools, in.fixed("pool count", 4));
  if (num_pools == 0 || num_pools > kMaxPools) {
    return absl::InvalidArgumentError(
        str_cat("ucx descriptor: pool count ", num_pools, " is not in [1, ", kMaxPools, "]"));
  }
  for (std::uint64_t i = 0; i < num_pools; ++i) {
    UcxRemotePool pool;
    const std::string field = str_cat("pool ", i);
    BATON_ASSIGN_OR_RETURN(pool.name, in.blob(str_cat(field, " name"), kMaxNameBytes));
    BATON_ASSIGN_OR_RETURN(pool.base, in.fixed(str_cat(field, " base"), 8));
    BATON_ASSIGN_OR_RETURN(pool.bytes, in.fixed(str_cat(field, " bytes"), 8));
    BATON_ASSIGN_OR_RETURN(pool.rkey, in.blob(str_cat(field, " rkey"), kMaxBlobBytes));
    if (pool.bytes == 0) {
      return absl::InvalidArgumentError(str_cat("ucx descriptor: ", field, " (", pool.name, ") is empty"));
    }
    if (pool.base > UINT64_MAX - pool.bytes) {
      return absl::InvalidArgumentError(str_cat("ucx descriptor: ", field, " (", pool.name, ") base ",
                                                pool.base, " + ", pool.bytes, " bytes overflows"));
    }
    if (pool.rkey.empty()) {
      return absl::InvalidArgumentError(str_cat("ucx descriptor: ", field, " rkey is empty"));
    }
    out.pools.push_back(std::move(pool));
  }
  BATON_ASSIGN_OR_RETURN(std::uint64_t has_shm, in.fixed("shared-memory flag", 4));
  if (has_shm > 1) {
    return absl::InvalidArgumentError(str_cat("ucx descriptor: shared-memory flag ", has_shm, " is not 0 or 1"));
  }
  if (has_shm == 1) {
    UcxShmSection shm;
    BATON_ASSIGN_OR_RETURN(shm.worker_address, in.blob("shared-memory worker address", kMaxBlobBytes));
    if (shm.worker_address.empty()) {
      return absl::InvalidArgumentError("ucx descriptor: shared-memory worker address is empty");
    }
    for (std::uint64_t i = 0; i < num_pools; ++i) {
      const std::string field = str_cat("shared-memory rkey of pool ", i);
      BATON_ASSIGN_OR_RETURN(std::string rkey, in.blob(field, kMaxBlobBytes));
      if (rkey.empty()) return absl::InvalidArgumentError(str_cat("ucx descriptor: ", field, " is empty"));
      shm.rkeys.push_back(std::move(rkey));
    }
    out.shm = std::move(shm);
  }
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        str_cat("ucx descriptor: ", in.left(), " trailing bytes after the last ",
                out.shm ? "shared-memory rkey" : "pool"));
  }
  return out;
}

}  // namespace baton::kv
