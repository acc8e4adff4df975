// The router's HTTP listener on its own: a second router asking for a port in use must fail to
// start (cpp-httplib's default SO_REUSEPORT would let it bind and take a share of the connections).
#include "router/http/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "router/router_service.h"

namespace baton::router::http {
namespace {

using ::testing::HasSubstr;

TEST(HttpServerStart, RefusesAPortInUse) {
  RouterService router(RouterOptions{});
  HttpServer first(router, HttpOptions{});
  const auto port = first.start();
  ASSERT_TRUE(port.ok()) << port.status();
  HttpOptions options;
  options.port = *port;
  HttpServer second(router, options);
  const auto again = second.start();
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("cannot listen for HTTP on 127.0.0.1:" + std::to_string(*port)));
}

}  // namespace
}  // namespace baton::router::http
