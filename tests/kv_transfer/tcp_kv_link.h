// A KvLink (kv_transfer/kv_link.h) over a loopback TCP connection, for the link transport's tests
// on machines without GPUs: NCCL's contract (pieces in posting order, sizes paired, when_done
// once everything posted has completed, abort unblocks everything) over host memory. Test-only:
// production links move device memory (kv_transfer/nccl_kv_link.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kv_transfer/kv_link.h"

namespace baton::kv::testing {

struct TcpLinkOptions {
  std::uint64_t max_piece_bytes = 1 << 20;
  // The receiving side never reads: a link whose peer does not keep up (deadline tests).
  bool stall_receives = false;
};

class TcpKvLinkFactory final : public KvLinkFactory {
 public:
  explicit TcpKvLinkFactory(TcpLinkOptions options = {}) : options_(options) {}
  ~TcpKvLinkFactory() override;

  std::string_view kind() const override { return "tcp"; }
  std::uint64_t max_piece_bytes() const override { return options_.max_piece_bytes; }
  // A listening socket on 127.0.0.1; the id is its port.
  absl::StatusOr<std::string> new_link_id() override;
  absl::StatusOr<std::unique_ptr<KvLink>> join(const std::string& link_id, int rank, Deadline deadline,
                                               const std::function<bool()>& give_up) override;

  // Links joined so far.
  int links() const;
  // Whether links joined from now on stall their receives.
  void set_stall_receives(bool stall) {
    std::lock_guard lock(mu_);
    options_.stall_receives = stall;
  }

 private:
  TcpLinkOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, int> listeners_;  // by id, until rank 0 joins
  int links_ = 0;
};

}  // namespace baton::kv::testing
