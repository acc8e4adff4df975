// Lints Dockerfiles with dockerfile-utils (the validator behind VS Code's Dockerfile support):
// syntax errors, unknown instructions, bad flags and arguments, lowercase instructions, several
// CMD/ENTRYPOINT/HEALTHCHECK, relative WORKDIR, JSON in single quotes, MAINTAINER...
//
//   node lint-dockerfile.mjs Dockerfile...
//
// Prints "<file>:<line>:<column>: <error|warning>: <message>" for each problem and exits 1 when
// there is any error or warning (2 on bad usage). Every check the library can switch is on, as a
// warning at least.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { validate, ValidationSeverity } = require("dockerfile-utils");

const settings = {
  deprecatedMaintainer: ValidationSeverity.WARNING,
  directiveCasing: ValidationSeverity.WARNING,
  emptyContinuationLine: ValidationSeverity.WARNING,
  instructionCasing: ValidationSeverity.WARNING,
  instructionCmdMultiple: ValidationSeverity.WARNING,
  instructionEntrypointMultiple: ValidationSeverity.WARNING,
  instructionHealthcheckMultiple: ValidationSeverity.WARNING,
  instructionJSONInSingleQuotes: ValidationSeverity.WARNING,
  instructionWorkdirRelative: ValidationSeverity.WARNING,
};
// LSP diagnostic severities.
const SEVERITY = { 1: "error", 2: "warning", 3: "info", 4: "hint" };

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node lint-dockerfile.mjs Dockerfile...");
  process.exit(2);
}
let failing = 0;
for (const file of files) {
  const diagnostics = validate(readFileSync(file, "utf8"), settings);
  for (const d of diagnostics) {
    const { line, character } = d.range.start;
    console.error(`${file}:${line + 1}:${character + 1}: ${SEVERITY[d.severity] ?? "problem"}: ${d.message}`);
    if (d.severity === 1 || d.severity === 2) failing++;
  }
}
if (failing > 0) {
  console.error(`${failing} problem(s)`);
  process.exit(1);
}
console.log(`${files.length} Dockerfile(s) clean`);
