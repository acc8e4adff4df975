// Files compiled into baton-router (cmake/BatonEmbed.cmake generates their definitions at build
// time): the /dashboard page and the chart library it uses, so the router serves them with no
// files beside the binary and no network access.
#pragma once

#include <string_view>
#include <vector>

namespace baton::router::http {

struct EmbeddedFile {
  std::string_view name;     // base name, e.g. "index.html"
  std::string_view content;  // the file's bytes, static storage
};

// router/http/dashboard/index.html, dashboard.js and vendor/ (uPlot).
const std::vector<EmbeddedFile>& dashboard_files();

}  // namespace baton::router::http
