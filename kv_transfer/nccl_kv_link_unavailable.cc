// make_nccl_link_factory in a build without the CUDA toolkit: the NCCL link is not there.
#include "kv_transfer/nccl_kv_link.h"

namespace baton::kv {

absl::StatusOr<std::shared_ptr<KvLinkFactory>> make_nccl_link_factory(NcclLinkOptions) {
  return absl::FailedPreconditionError(
      "the NCCL KV transport is not in this build: it is built with the CUDA toolkit (BATON_CUDA)");
}

}  // namespace baton::kv
