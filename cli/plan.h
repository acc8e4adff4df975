// `baton plan`: sizes a deployment from measurements instead of guesses. `plan profile` measures
// this deployment's speeds (plan_measure.h) into a profile; `plan` simulates a request trace
// (plan_trace.h) through candidate P:D ratios and k with those speeds (plan_sim.h) and prints the
// cheapest configuration that meets a TTFT and TPOT target, as values for the Helm chart;
// `plan simulate` predicts one configuration, in `baton bench serve`'s terms, to check against a
// measured run.
#pragma once

namespace baton::cli {

int plan_main(int argc, char** argv);

}  // namespace baton::cli
