// The words a draining node (SIGTERM received, running requests finishing) puts in the UNAVAILABLE
// status it refuses new work with. The router recognises them to place such a request elsewhere
// without spending the one retry it gives other failures (router/request_flow.cc), so both sides
// take them from here.
//
// Must not: carry anything but the phrase and its test.
#pragma once

#include <string_view>

namespace baton {

inline constexpr std::string_view kNodeDrainingPhrase = "node is draining";

// True for a status message that says its node is draining.
inline bool says_node_draining(std::string_view message) { return message.find(kNodeDrainingPhrase) != std::string_view::npos; }

}  // namespace baton
