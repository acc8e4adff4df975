// router/request_limits: a chat's tools and calls count against the request's bounds, and an
// error names the field (as the HTTP API's `param`).
#include "router/request_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton::router {
namespace {

using ::testing::HasSubstr;

baton::v1::GenerateRequest chat_with_tools(int tools, int calls) {
  baton::v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("assistant");
  for (int i = 0; i < calls; ++i) m->add_tool_calls()->set_name("f");
  for (int i = 0; i < tools; ++i) r.mutable_chat()->add_tools()->set_name("f" + std::to_string(i));
  return r;
}

TEST(RequestLimits, ToolsAndCallsAreBounded) {
  const RequestLimits limits;
  EXPECT_TRUE(check_request_limits(chat_with_tools(kMaxTools, kMaxTools), limits, 0).ok());
  const absl::Status tools = check_request_limits(chat_with_tools(kMaxTools + 1, 0), limits, 0);
  EXPECT_THAT(tools.message(), HasSubstr("tools: 129 tools; at most 128"));
  EXPECT_EQ(limited_field(tools), "tools");
  const absl::Status calls = check_request_limits(chat_with_tools(0, kMaxTools + 1), limits, 0);
  EXPECT_EQ(limited_field(calls), "messages");

  // A tool's schema and a call's arguments are prompt bytes.
  RequestLimits small;
  small.max_prompt_bytes = 64;
  baton::v1::GenerateRequest r = chat_with_tools(1, 0);
  r.mutable_chat()->mutable_tools(0)->set_parameters(std::string(100, ' '));
  EXPECT_EQ(limited_field(check_request_limits(r, small, 0)), "tools");
  r = chat_with_tools(0, 1);
  r.mutable_chat()->mutable_messages(0)->mutable_tool_calls(0)->set_arguments(std::string(100, ' '));
  EXPECT_EQ(limited_field(check_request_limits(r, small, 0)), "messages");
}

}  // namespace
}  // namespace baton::router
