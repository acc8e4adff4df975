// router/router_service: the real router started in-process on 127.0.0.1:0 with no nodes, as a
// client sees it: Generate is UNAVAILABLE with a clear message, Tokenize works, health is SERVING,
// reflection lists baton.v1.Baton, nodes can register.
#include "router/router_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "baton/v1/node.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "router/request_limits.h"
#include "router_client.h"
#include "tokenizer/tokenizer.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string bundled_dir() { return std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-code/target"; }

class RouterWithoutNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    RouterOptions options;
    options.model_dir = bundled_dir();
    options.internal_port = 0;  // the node registry, on a port of its own
    options.expose_topology = true;
    options.max_registered_nodes = 3;
    router_ = std::make_unique<RouterService>(options);
    auto port = router_->start();
    ASSERT_TRUE(port.ok()) << port.status();
    ASSERT_GT(*port, 0);
    client_ = std::make_unique<testing::RouterClient>(*port);
  }
  void TearDown() override { router_->shutdown(); }

  std::unique_ptr<RouterService> router_;
  std::unique_ptr<testing::RouterClient> client_;
};

TEST_F(RouterWithoutNodes, GenerateIsUnavailableWithAClearMessage) {
  baton::v1::GenerateRequest r;
  r.set_text("def f():");
  auto result = client_->generate(r);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("no decode node"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("--decode HOST:PORT"));
  EXPECT_TRUE(result.messages.empty());
  // Bad input is still INVALID_ARGUMENT first, naming the field.
  r.clear_text();
  result = client_->generate(r);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("prompt is missing"));
  EXPECT_EQ(router_->running_requests(), 0u);
}

// Sampling values out of range are the client's INVALID_ARGUMENT at the router, naming the field,
// before any node is asked (here there is none: a node's UNAVAILABLE would mean it got that far).
TEST_F(RouterWithoutNodes, SamplingOutOfRangeIsRefusedAtTheDoor) {
  const auto refused = [&](const std::function<void(baton::v1::SamplingParams&)>& set, const std::string& field) {
    baton::v1::GenerateRequest r;
    r.set_text("def f():");
    set(*r.mutable_sampling());
    const auto result = client_->generate(r);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(result.status.error_message(), HasSubstr(field)) << result.status.error_message();
    EXPECT_EQ(limited_field(absl::InvalidArgumentError(result.status.error_message())), field);
  };
  refused([](auto& s) { s.set_top_p(2.0f); }, "top_p");
  refused([](auto& s) { s.set_temperature(-1.0f); }, "temperature");
  refused([](auto& s) { s.set_temperature(std::nanf("")); }, "temperature");
  refused([](auto& s) { s.set_top_k(-2); }, "top_k");
  refused([](auto& s) { s.set_min_p(1.5f); }, "min_p");
  refused([](auto& s) { s.set_repetition_penalty(0.0f); }, "repetition_penalty");
  refused([](auto& s) { s.set_presence_penalty(3.0f); }, "presence_penalty");
  refused([](auto& s) { s.set_max_tokens(0); }, "max_tokens");
  refused([](auto& s) {
    s.set_max_tokens(4);
    s.set_min_tokens(5);
  }, "min_tokens");
  refused([](auto& s) { s.set_max_speculative_tokens(-1); }, "max_speculative_tokens");
  refused([](auto& s) { s.add_stop(""); }, "stop");
  refused([](auto& s) { s.add_stop_token_ids(-3); }, "stop_token_ids");
  refused([](auto& s) { (*s.mutable_logit_bias())[5] = 100.5f; }, "logit_bias");
  refused([](auto& s) { (*s.mutable_logit_bias())[-1] = 1.0f; }, "logit_bias");
  refused([](auto& s) { (*s.mutable_logit_bias())[5] = std::nanf(""); }, "logit_bias");
  refused([](auto& s) {
    for (int t = 0; t < 1025; ++t) (*s.mutable_logit_bias())[t] = 1.0f;
  }, "logit_bias");
  // A response format is compiled at the door: too large, not JSON, a keyword it cannot enforce,
  // or with ignore_eos, it is the client's INVALID_ARGUMENT naming the field.
  refused([](auto& s) { s.set_response_format(R"({"type":"json_schema","json_schema":{"schema":{"description":")" +
                                              std::string(70000, 'x') + R"("}}})"); }, "response_format");
  refused([](auto& s) { s.set_response_format("{"); }, "response_format");
  refused([](auto& s) {
    s.set_response_format(R"({"type":"json_schema","json_schema":{"schema":{"type":"string","format":"date"}}})");
  }, "response_format");
  refused([](auto& s) {
    s.set_response_format(R"({"type":"json_object"})");
    s.set_ignore_eos(true);
  }, "response_format");
  EXPECT_EQ(router_->running_requests(), 0u);
}

TEST_F(RouterWithoutNodes, TokenizeGivesGeneratesIds) {
  auto tokenizer = Tokenizer::load(bundled_dir());
  ASSERT_TRUE(tokenizer.ok());
  grpc::ClientContext context;
  baton::v1::TokenizeRequest request;
  request.set_text("import os\n");
  baton::v1::TokenizeResponse response;
  ASSERT_TRUE(client_->stub().Tokenize(&context, request, &response).ok());
  const auto expected = (*tokenizer)->encode("import os\n", true);
  EXPECT_EQ(std::vector<std::int32_t>(response.ids().begin(), response.ids().end()), expected);
  EXPECT_EQ(response.prompt(), "import os\n");

  // A chat, through the bundled model's template: the rendered text encoded without another BOS.
  grpc::ClientContext chat_context;
  baton::v1::TokenizeRequest chat;
  auto* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  ASSERT_TRUE(client_->stub().Tokenize(&chat_context, chat, &response).ok());
  EXPECT_THAT(response.prompt(), ::testing::StartsWith("<|endoftext|># user\nhi\n"));
  EXPECT_EQ(std::vector<std::int32_t>(response.ids().begin(), response.ids().end()),
            (*tokenizer)->encode(response.prompt(), false));
  // A role the template does not know: its own error, as INVALID_ARGUMENT.
  grpc::ClientContext bad_context;
  message->set_role("function");
  const grpc::Status s = client_->stub().Tokenize(&bad_context, chat, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("roles system, user, assistant and tool"));
}

TEST_F(RouterWithoutNodes, HealthIsServing) {
  auto health = grpc::health::v1::Health::NewStub(client_->channel());
  for (const std::string service : {"", "baton.v1.Baton"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

TEST_F(RouterWithoutNodes, ReflectionListsTheServices) {
  // ServerReflectionInfo with list_services = "" (field 7), as raw bytes: Debian's gRPC ships no
  // generated reflection client.
  grpc::ClientContext context;
  const grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                         grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(client_->channel().get(),
                                                                                            method, &context));
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  ASSERT_TRUE(stream->Write(grpc::ByteBuffer(&slice, 1)));
  stream->WritesDone();
  grpc::ByteBuffer reply;
  ASSERT_TRUE(stream->Read(&reply));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_THAT(bytes, HasSubstr("baton.v1.Baton"));
  // The registry is on the internal port only, never beside the public API.
  EXPECT_THAT(bytes, Not(HasSubstr("baton.node.v1.Registry")));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(RouterWithoutNodes, ModelInfoAndAbort) {
  grpc::ClientContext context;
  baton::v1::ModelInfo info;
  ASSERT_TRUE(client_->stub().GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.model(), "target");
  EXPECT_TRUE(info.has_tokenizer());
  EXPECT_TRUE(info.has_chat_template());
  EXPECT_EQ(info.vocab_size(), 4096);
  EXPECT_EQ(info.num_decode_nodes(), 0);
  EXPECT_EQ(info.num_prefill_nodes(), 0);

  grpc::ClientContext abort_context;
  baton::v1::AbortRequest abort;
  abort.set_request_id("nothing-runs");
  baton::v1::AbortResponse found;
  ASSERT_TRUE(client_->stub().Abort(&abort_context, abort, &found).ok());
  EXPECT_FALSE(found.found());
}

TEST_F(RouterWithoutNodes, NodesRegister) {
  ASSERT_FALSE(router_->internal_address().empty());
  auto registry = baton::node::v1::Registry::NewStub(
      grpc::CreateChannel(router_->internal_address(), grpc::InsecureChannelCredentials()));
  auto do_register = [&](const std::string& address, const std::string& role) {
    grpc::ClientContext context;
    baton::node::v1::RegisterNodeRequest request;
    request.set_address(address);
    request.set_role(role);
    baton::node::v1::RegisterNodeResponse response;
    return registry->RegisterNode(&context, request, &response);
  };
  const grpc::Status bad_role = do_register("127.0.0.1:1", "decoder");
  EXPECT_EQ(bad_role.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_role.error_message(), HasSubstr("\"prefill\", \"decode\" or \"both\""));
  EXPECT_EQ(do_register("", "decode").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(do_register("127.0.0.1", "decode").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(do_register("bad host:1", "decode").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(do_register("127.0.0.1:1", "both").ok());
  ASSERT_TRUE(do_register("127.0.0.1:1", "decode").ok());  // again: harmless
  ASSERT_TRUE(do_register("127.0.0.1:2", "prefill").ok());
  // The public port does not take registrations.
  {
    grpc::ClientContext context;
    baton::node::v1::RegisterNodeRequest request;
    request.set_address("127.0.0.1:3");
    request.set_role("decode");
    baton::node::v1::RegisterNodeResponse response;
    EXPECT_EQ(baton::node::v1::Registry::NewStub(client_->channel())->RegisterNode(&context, request, &response).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  const auto nodes = router_->nodes().status();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].kind, NodeKind::kDecode);
  EXPECT_EQ(nodes[1].kind, NodeKind::kPrefill);
  EXPECT_FALSE(nodes[0].usable);
  // Nothing listens there: Generate names the node and why it is not usable.
  router_->nodes().poll_once();
  baton::v1::GenerateRequest r;
  r.set_text("x");
  auto result = client_->generate(r);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("no usable decode node (1 known: 127.0.0.1:1: health check"));
  // --max-registered-nodes 3: the third is taken, the fourth refused, the known ones still renew.
  EXPECT_TRUE(do_register("127.0.0.1:3", "prefill").ok());
  EXPECT_EQ(do_register("127.0.0.1:4", "prefill").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(do_register("127.0.0.1:2", "prefill").ok());
  EXPECT_EQ(router_->nodes().status().size(), 3u);
}

TEST(RouterTokenIdMode, RefusesTextAndServesIds) {
  RouterOptions options;  // no --model: token-id mode
  RouterService router(options);
  auto port = router.start();
  ASSERT_TRUE(port.ok());
  testing::RouterClient client(*port);
  baton::v1::GenerateRequest r;
  r.set_text("hello");
  auto result = client.generate(r);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("token-id mode"));
  result = client.generate(testing::token_request({1, 2, 3}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);  // valid; there is just no node
  grpc::ClientContext context;
  baton::v1::ModelInfo info;
  ASSERT_TRUE(client.stub().GetModelInfo(&context, {}, &info).ok());
  EXPECT_FALSE(info.has_tokenizer());
}

// --chat-template: a model without a template of its own serves chats with the given one, as a
// file or as the template itself; a template that does not compile stops the start, naming the flag.
TEST(RouterStart, AChatTemplateFlagGivesTheModelAChatTemplate) {
  const std::string source = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("baton-chat-template-" + std::to_string(::getpid()) + ".jinja");
  std::ofstream(file) << source;
  for (const std::string& arg : {source, file.string()}) {
    SCOPED_TRACE(arg);
    RouterOptions options;
    options.model_dir = bundled_dir();
    options.chat_template = arg;
    RouterService router(options);
    auto port = router.start();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_TRUE(router.model_info().has_chat_template());
    testing::RouterClient client(*port);
    grpc::ClientContext context;
    baton::v1::TokenizeRequest chat;
    auto* m = chat.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("def f");
    baton::v1::TokenizeResponse response;
    const grpc::Status s = client.stub().Tokenize(&context, chat, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.prompt(), "user: def f\nassistant:");
    router.shutdown();
  }
  std::filesystem::remove(file);
  // A template that does not compile, and a file that is not there.
  for (const auto& [arg, said] : {std::pair<std::string, std::string>{"{% if %}", "--chat-template"},
                                  {"no-such-template.jinja", "no such file"}}) {
    RouterOptions options;
    options.model_dir = bundled_dir();
    options.chat_template = arg;
    RouterService router(options);
    const auto refused = router.start();
    ASSERT_FALSE(refused.ok()) << arg;
    EXPECT_THAT(refused.status().message(), HasSubstr(said)) << arg;
  }
}

TEST(RouterStart, RefusesAPortInUse) {
  RouterService first(RouterOptions{});
  auto port = first.start();
  ASSERT_TRUE(port.ok());
  RouterOptions options;
  options.port = *port;
  RouterService second(options);
  const auto again = second.start();
  EXPECT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(*port)));
}

}  // namespace
}  // namespace baton::router
