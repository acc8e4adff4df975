// The router's /dashboard on a real local cluster (cli/cluster.h, as `baton up --http-port 0`)
// serving EAGLE-3: after real requests, /dashboard/data agrees with what the requests' own usage
// says (drafts, accepted tokens, output tokens, request count), and headless Chromium, offline,
// loads the page and, at load (the data comes in the page), draws every chart with data (the page
// marks it in the DOM) with numbers in every legend without hovering; the screenshot shows the
// charts' line colours inside each chart's canvas.
#include <cmath>
#include <filesystem>
#include <regex>

#include "gmock/gmock.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/http/png_image.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using nlohmann::json;

constexpr int kCharts = 5;  // acceptance, positions, ttft, tpot, throughput

std::string host_port(const std::string& base_url) {  // http://HOST:PORT/v1 -> HOST:PORT
  const std::size_t start = base_url.find("//") + 2;
  return base_url.substr(start, base_url.find('/', start) - start);
}

json get_json(httplib::Client& client, const std::string& path) {
  auto res = client.Get(path);
  if (!res || res->status != 200) return nullptr;
  return json::parse(res->body, nullptr, false);
}

double sum(const json& values) {
  double s = 0;
  for (const json& v : values) {
    if (v.is_number()) s += v.get<double>();
  }
  return s;
}

std::filesystem::path chromium_profile() {
  return std::filesystem::temp_directory_path() / ("baton-chromium-" + std::to_string(::getpid()));
}

// Headless Chromium (--headless=new) on `url`: 1280x1000 CSS pixels at scale 1. With `polls`,
// virtual time runs 8 s ahead so the page polls /dashboard/data a few times before the DOM or
// screenshot is taken; without, they are taken at load, when only the data served in the page
// can have been drawn.
std::vector<std::string> chromium(const std::string& binary, const std::string& url,
                                  const std::vector<std::string>& mode, bool polls = true) {
  std::vector<std::string> argv = {binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                                   "--force-device-scale-factor=1", "--window-size=1280,1000",
                                   "--no-first-run", "--disable-extensions",
                                   "--user-data-dir=" + chromium_profile().string()};
  if (polls) argv.push_back("--virtual-time-budget=8000");
  argv.insert(argv.end(), mode.begin(), mode.end());
  argv.push_back(url);
  return argv;
}

std::string which(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const auto p = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(p)) return p.string();
  }
  return "";
}

TEST(Dashboard, ShowsTheClusterAsItsRequestsSawIt) {
  const std::string chromium_path = which("chromium");
  ASSERT_FALSE(chromium_path.empty()) << "chromium is not installed (scripts/install-deps.sh installs it)";
  const SpecCase eagle3 = family_methods()[4];
  ASSERT_EQ(eagle3.label, "eagle3");
  cli::ClusterOptions options = cluster_options(eagle3.config, "ucx", "dashboard");
  options.http_port = 0;
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string http = host_port((*cluster)->router_http_url());

  // Real traffic through the router, and what each request's usage says.
  auto stub = router_stub((*cluster)->router_address());
  std::vector<v1::GenerateRequest> requests;
  constexpr int kRequests = 6, kMaxTokens = 24;
  for (int i = 0; i < kRequests; ++i) {
    v1::GenerateRequest r;
    r.set_text(code_prompts()[static_cast<std::size_t>(i)]);
    r.mutable_sampling()->set_max_tokens(kMaxTokens);
    r.mutable_sampling()->set_temperature(0);
    r.mutable_sampling()->set_ignore_eos(true);
    requests.push_back(r);
  }
  std::int64_t drafts = 0, draft_tokens = 0, accepted = 0, output_tokens = 0;
  httplib::Client client("http://" + http);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  json data;
  // The router learns the decode node's counters at its next Info poll (every 500 ms): polls
  // /dashboard/data until its window holds every draft so far (deadline 20 s).
  auto await_drafts = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      data = get_json(client, "/dashboard/data");
      if (data.is_null() || data.is_discarded()) return false;
      const json& methods = data["speculation"]["methods"];
      if (!methods.empty() && methods[0]["window"]["num_draft_tokens"] == draft_tokens) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  // Two waves in two time buckets, so that the time series have more than one point.
  for (int wave = 0; wave < 2; ++wave) {
    const std::vector<v1::GenerateRequest> half(requests.begin() + wave * kRequests / 2,
                                                requests.begin() + (wave + 1) * kRequests / 2);
    for (const Completion& c : generate_all(*stub, half)) {
      ASSERT_TRUE(c.status.ok()) << c.status.error_message();
      drafts += c.usage.speculation().num_drafts();
      draft_tokens += c.usage.speculation().num_draft_tokens();
      accepted += c.usage.speculation().num_accepted_tokens();
      output_tokens += static_cast<std::int64_t>(c.ids.size());
    }
    ASSERT_GT(draft_tokens, 0);
    ASSERT_TRUE(await_drafts()) << "the router's window never held the " << draft_tokens << " draft tokens sent: "
                                << data.dump();
    if (wave == 0) {
      // Wait (deadline: one bucket and a second) until the wall clock is in the next bucket.
      const double width = data["bucket_s"].get<double>();
      auto bucket = [&] {
        return std::floor(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() / width);
      };
      const double first = bucket();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(width + 1);
      while (bucket() == first && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      ASSERT_GT(bucket(), first);
    }
  }
  const json& methods = data["speculation"]["methods"];
  ASSERT_EQ(methods.size(), 1u) << data.dump();
  const json& m = methods[0];
  EXPECT_EQ(m["method"], "eagle3");
  EXPECT_EQ(m["num_speculative_tokens"], 4);
  EXPECT_EQ(m["window"]["num_drafts"], drafts);
  EXPECT_EQ(m["window"]["num_draft_tokens"], draft_tokens);
  EXPECT_EQ(m["window"]["num_accepted_tokens"], accepted);
  EXPECT_DOUBLE_EQ(m["window"]["acceptance_rate"].get<double>(), static_cast<double>(accepted) / draft_tokens);
  EXPECT_DOUBLE_EQ(m["window"]["mean_acceptance_length"].get<double>(), 1.0 + static_cast<double>(accepted) / drafts);
  ASSERT_EQ(m["window"]["per_position_rates"].size(), 4u);
  EXPECT_NEAR(sum(m["window"]["per_position_rates"]), static_cast<double>(accepted) / drafts, 1e-9);
  auto buckets_with = [](const json& values) {
    int n = 0;
    for (const json& v : values) n += v.is_number() && v.get<double>() > 0;
    return n;
  };
  // At least the two waves' buckets (a wave may straddle a bucket boundary itself).
  EXPECT_GE(buckets_with(m["acceptance_rate"]), 2);
  const json& q = data["requests"];
  EXPECT_EQ(sum(q["requests"]), kRequests);
  EXPECT_GE(buckets_with(q["requests"]), 2);
  EXPECT_EQ(buckets_with(q["ttft_p50_ms"]), buckets_with(q["requests"]));
  EXPECT_EQ(sum(q["output_tokens"]), output_tokens);
  EXPECT_GT(sum(q["output_tokens_per_s"]), 0);
  EXPECT_GT(sum(q["ttft_p50_ms"]), 0);
  EXPECT_GT(sum(q["tpot_p99_ms"]), 0);
  EXPECT_EQ(data["nodes"].size(), 2u);

  // The page and its files come from the binary; unknown files are 404.
  for (const char* path : {"/dashboard", "/dashboard/dashboard.js", "/dashboard/uPlot.iife.min.js", "/dashboard/uPlot.min.css"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_GT(res->body.size(), 500u) << path;
  }
  EXPECT_EQ(client.Get("/dashboard/nothing.js")->status, 404);

  // The page arrives with the data in it: nothing to wait for before drawing.
  {
    auto page = client.Get("/dashboard");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->body.find("{{INITIAL_DATA}}"), std::string::npos);
    EXPECT_THAT(page->body, ::testing::HasSubstr("\"num_draft_tokens\":" + std::to_string(draft_tokens)));
  }

  // Headless Chromium at load, before any poll: the DOM says every chart drew data, and where
  // each chart's canvas is; the status is not "loading…".
  const std::string url = "http://" + http + "/dashboard";
  const auto [dom_exit, dom] = run_to_exit(chromium(chromium_path, url, {"--dump-dom"}, /*polls=*/false));
  ASSERT_EQ(dom_exit, 0) << dom;
  EXPECT_THAT(dom, ::testing::HasSubstr("data-charts-with-data=\"" + std::to_string(kCharts) + "\"")) << dom;
  EXPECT_THAT(dom, ::testing::Not(::testing::HasSubstr("loading…")));

  // Without hovering, every legend shows values (uPlot's own placeholder is "--"): per chart, the
  // x value and one per series, each with digits in it.
  const std::regex value_re(R"re(<td class="u-value">([^<]*)</td>)re");
  int legend_values = 0;
  for (std::sregex_iterator it(dom.begin(), dom.end(), value_re), end; it != end; ++it) {
    ++legend_values;
    EXPECT_TRUE(std::regex_search((*it)[1].str(), std::regex("[0-9]"))) << "a legend value without a number: '"
                                                                           << (*it)[1] << "'";
  }
  // acceptance 1 + 1 method, positions 1 + 1, ttft 1 + 2, tpot 1 + 2, throughput 1 + 2.
  EXPECT_EQ(legend_values, 13) << dom;
  // The decode node's row: k and where its drafts come from.
  EXPECT_TRUE(std::regex_search(dom, std::regex("<td>eagle3</td><td>4</td><td>on the node</td>"))) << dom;
  std::map<std::string, std::array<int, 4>> rects;
  const std::regex panel_re(R"re(id="(\w+)"[^>]*data-has-data="1"[^>]*data-rect="(\d+),(\d+),(\d+),(\d+)")re");
  for (std::sregex_iterator it(dom.begin(), dom.end(), panel_re), end; it != end; ++it) {
    rects[(*it)[1]] = {std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]), std::stoi((*it)[5])};
  }
  ASSERT_EQ(rects.size(), static_cast<std::size_t>(kCharts)) << dom;

  // The screenshot: each chart's canvas holds plenty of strongly coloured pixels (the series;
  // background, axes, grid and text are white, grey or black).
  const std::string png = (std::filesystem::temp_directory_path() / ("baton-dashboard-" + std::to_string(::getpid()) + ".png")).string();
  const auto [shot_exit, shot_log] = run_to_exit(chromium(chromium_path, url, {"--screenshot=" + png}));
  ASSERT_EQ(shot_exit, 0) << shot_log;
  auto image = read_png(png);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 1280);
  for (const auto& [id, r] : rects) {
    int coloured = 0;
    for (int y = r[1]; y < std::min(r[1] + r[3], image->height); ++y) {
      for (int x = r[0]; x < std::min(r[0] + r[2], image->width); ++x) {
        const std::uint8_t* p = image->at(x, y);
        const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
        if (hi - lo > 80) ++coloured;
      }
    }
    std::printf("chart %s: %d coloured pixels in %dx%d\n", id.c_str(), coloured, r[2], r[3]);
    // One 8-pixel point is about 50 (a loaded machine may put a short run in one bucket); two and
    // the line between them are well over 100; an empty chart has 0.
    EXPECT_GT(coloured, 40) << "chart " << id << " at " << r[0] << "," << r[1] << " " << r[2] << "x" << r[3];
  }
  // BATON_DASHBOARD_SCREENSHOT=PATH keeps a copy (e.g. for a pull request).
  if (const char* keep = std::getenv("BATON_DASHBOARD_SCREENSHOT")) {
    std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
  }
  std::filesystem::remove_all(chromium_profile());
  if (!::testing::Test::HasFailure()) {
    std::filesystem::remove(png);
  } else {
    std::fprintf(stderr, "screenshot kept at %s\n", png.c_str());
  }
}

}  // namespace
}  // namespace baton::testing
