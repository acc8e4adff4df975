// Fuzzes the wire -> engine conversions of node_common/convert.h on the node.proto messages a node
// receives from a peer, then the engine's own check of the result (SamplingParams::validate, as
// the nodes run it before a request reaches the engine).
//
// Input: byte 0 % 5 picks the message; the rest is its protobuf wire bytes.
//   0 PrefillRequest   (prefill node: sampling_from_proto(request.sampling))
//   1 CommitRequest    (decode node: handoff_from_proto(request.record), P's hand-off record)
//   2 DecodeRequest    (decode node, local prefill: sampling_from_proto(request.local.sampling))
//   3 DecodeResponse   (router: finish_reason_from_proto, and logprobs as the engine's TokenOutput)
//   4 baton.v1.SamplingParams on its own
// Bytes that do not parse as the message are dropped, as gRPC drops them.
//
// Checks: every conversion of a parsed message runs without crashing; the engine -> wire -> engine
// round trips are exact (to_proto(from_proto(to_proto(x))) serializes to the same bytes as
// to_proto(x); a record that converted converts again); a record's feature rows are whole rows.
//
// Must not: start an engine or a node, or skip an input by its content.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz/fuzz_support.h"
#include "node_common/convert.h"

namespace {

// The engine's largest vocabulary among the supported families is ~152k (Qwen2); any value works.
constexpr std::int32_t kVocabSize = 152064;

// Deterministic serialization: map fields (logit_bias) otherwise go out in an order that differs
// between two maps of the same entries.
std::string wire(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    FUZZ_CHECK(m.SerializeToCodedStream(&coded));
  }
  return out;
}

void sampling(const baton::v1::SamplingParams& p) {
  const baton::SamplingParams s = baton::sampling_from_proto(p);
  (void)s.validate(kVocabSize);
  (void)s.greedy();
  const baton::v1::SamplingParams back = baton::sampling_to_proto(s);
  FUZZ_CHECK(wire(baton::sampling_to_proto(baton::sampling_from_proto(back))) == wire(back));
}

void handoff(const baton::node::v1::HandoffRecord& p) {
  sampling(p.sampling());
  auto record = baton::handoff_from_proto(p);
  if (!record.ok()) return;
  const baton::HandoffRecord& h = *record;
  FUZZ_CHECK(h.proposer.feature_width >= 0);
  FUZZ_CHECK(h.proposer.feature_width == 0 ||
             h.proposer.feature_rows.size() % static_cast<std::size_t>(h.proposer.feature_width) == 0);
  (void)h.params.validate(kVocabSize);
  const baton::node::v1::HandoffRecord back = baton::handoff_to_proto(h);
  auto again = baton::handoff_from_proto(back);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(wire(baton::handoff_to_proto(*again)) == wire(back));
  FUZZ_CHECK(again->request_id == h.request_id && again->prompt == h.prompt && again->kv_blocks == h.kv_blocks);
  FUZZ_CHECK(again->proposer.feature_rows.size() == h.proposer.feature_rows.size());
  FUZZ_CHECK(h.proposer.feature_rows.empty() ||
             std::memcmp(again->proposer.feature_rows.data(), h.proposer.feature_rows.data(),
                         h.proposer.feature_rows.size() * sizeof(float)) == 0);
}

void decode_response(const baton::node::v1::DecodeResponse& r) {
  const baton::FinishReason reason = baton::finish_reason_from_proto(r.finish_reason());
  if (reason != baton::FinishReason::kNone) FUZZ_CHECK(baton::finish_reason_to_proto(reason) == r.finish_reason());
  for (const baton::v1::TokenLogprob& lp : r.logprobs()) {
    baton::TokenOutput t;
    t.token = lp.token();
    t.logprob = lp.logprob();
    for (const baton::v1::TopLogprob& top : lp.top()) t.top_logprobs.push_back({top.token(), top.logprob()});
    const baton::v1::TokenLogprob back = baton::token_logprob_to_proto(t);
    FUZZ_CHECK(back.token() == lp.token() && back.top_size() == lp.top_size());
  }
}

template <class Message>
bool parse(Message& m, const std::uint8_t* data, std::size_t size) {
  return m.ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs every string field that is not UTF-8; the parse fails either way.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 5;
  ++data;
  --size;
  switch (kind) {
    case 0: {
      baton::node::v1::PrefillRequest m;
      if (parse(m, data, size)) sampling(m.sampling());
      break;
    }
    case 1: {
      baton::node::v1::CommitRequest m;
      if (parse(m, data, size)) handoff(m.record());
      break;
    }
    case 2: {
      baton::node::v1::DecodeRequest m;
      if (parse(m, data, size)) sampling(m.local().sampling());
      break;
    }
    case 3: {
      baton::node::v1::DecodeResponse m;
      if (parse(m, data, size)) decode_response(m);
      break;
    }
    default: {
      baton::v1::SamplingParams m;
      if (parse(m, data, size)) sampling(m);
      break;
    }
  }
  return 0;
}
