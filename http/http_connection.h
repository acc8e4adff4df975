// One accepted HTTP connection of an HttpListener (see http_listener.h for the behaviour):
// serve_connection reads its requests one at a time, hands each to the listener's handler as an
// Exchange and writes the answer (keep-alive, deadlines, sizes, hang-up notice, TLS);
// turn_away answers a connection over the limit 503 without reading it. Internal to http/.
// Must not: accept connections or count them (http_listener.cc does).
#pragma once

#include <memory>

#include "boost/asio/ip/tcp.hpp"
#include "http/listener_state.h"

namespace baton::http {

// `state.connections` already counts the connection; it is uncounted when the connection ends.
void serve_connection(const std::shared_ptr<HttpListener::State>& state, boost::asio::ip::tcp::socket socket);
void turn_away(const std::shared_ptr<HttpListener::State>& state, boost::asio::ip::tcp::socket socket);

}  // namespace baton::http
