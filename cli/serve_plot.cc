#include "cli/serve_plot.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>

#include "common/status.h"

namespace baton::cli {

namespace {

// gnuplot string literal: single quotes, with quotes doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

}  // namespace

std::string latency_plot_script(const std::vector<ServeSummary>& runs, const std::string& png_path) {
  std::string data;
  for (const ServeSummary& s : runs) {
    // An unlimited rate ("inf": every request at once) sits at the rate it achieved, labelled so.
    const bool unlimited = std::isinf(s.request_rate);
    const double x = unlimited ? s.request_throughput : s.request_rate;
    data += str_cat(x, " ", s.ttft.p50_ms, " ", s.ttft.p90_ms, " ", s.ttft.p99_ms, " ", s.tpot.p50_ms, " ",
                    s.tpot.p90_ms, " ", s.tpot.p99_ms, unlimited ? " \"all at once\"" : " \"\"", "\n");
  }
  std::string script;
  script += "set terminal pngcairo size 1200,500 font 'sans,10'\n";
  script += "set output " + quoted(png_path) + "\n";
  script += "$runs << EOD\n" + data + "EOD\n";
  script += "set multiplot layout 1,2 title 'baton bench serve: latency percentiles vs request rate'\n";
  script += "set grid\nset key top left\nset offsets graph 0.02, graph 0.1, graph 0.12, 0\nset xlabel 'request rate (req/s; \"all at once\" at the rate it achieved)'\n";
  script += "set ylabel 'TTFT (ms)'\nset title 'Time to first token'\n";
  script += "plot $runs using 1:2 with linespoints title 'p50', '' using 1:3 with linespoints title 'p90', "
            "'' using 1:4 with linespoints title 'p99', '' using 1:4:8 with labels offset char 0,1 notitle\n";
  script += "set ylabel 'TPOT (ms)'\nset title 'Time per output token'\n";
  script += "plot $runs using 1:5 with linespoints title 'p50', '' using 1:6 with linespoints title 'p90', "
            "'' using 1:7 with linespoints title 'p99', '' using 1:7:8 with labels offset char 0,1 notitle\n";
  script += "unset multiplot\n";
  return script;
}

absl::Status plot_latency_vs_rate(const std::vector<ServeSummary>& runs, const std::string& png_path) {
  if (runs.empty()) return absl::InvalidArgumentError("nothing to plot");
  FILE* gp = popen("gnuplot 2>&1", "w");
  if (gp == nullptr) return absl::UnavailableError("cannot start gnuplot (apt install gnuplot-nox)");
  const std::string script = latency_plot_script(runs, png_path);
  std::fwrite(script.data(), 1, script.size(), gp);
  const int status = pclose(gp);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(str_cat("gnuplot failed writing ", png_path,
                                       WIFEXITED(status) && WEXITSTATUS(status) == 127
                                           ? " (gnuplot not found: apt install gnuplot-nox)"
                                           : ""));
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
