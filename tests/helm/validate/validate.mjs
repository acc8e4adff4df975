// Validates rendered Kubernetes manifests (helm-render's output) against the Kubernetes OpenAPI
// schemas that kubernetes-models is generated from, plus the CRDs of the Prometheus operator,
// cert-manager, KEDA and the Gateway API.
//
//   node validate.mjs MANIFEST.yaml...     ("-" reads standard input)
//
// Every object must have a known apiVersion/kind (an API still served by Kubernetes 1.28 and
// later), pass its schema, and carry no field the schema does not define (a typo such as
// `contaienrs` is rejected, as a strict API server would). Each problem is printed as
// "<kind>/<name>: <path>: <problem>"; the exit status is 1 when there is any, 2 on bad usage.
// It only checks structure: what the objects should contain is for the chart's own tests.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let parseAllDocuments;
try {
  ({ parseAllDocuments } = await import("yaml"));
} catch {
  console.error("validate.mjs: its npm packages are missing: run npm ci --prefix tests/helm/validate");
  process.exit(2);
}

// APIs removed before Kubernetes 1.28, which the schemas still describe.
const REMOVED = {
  "extensions/v1beta1": "removed in Kubernetes 1.22",
  "apps/v1beta1": "removed in Kubernetes 1.16",
  "apps/v1beta2": "removed in Kubernetes 1.16",
  "networking.k8s.io/v1beta1": "removed in Kubernetes 1.22 (use networking.k8s.io/v1)",
  "policy/v1beta1": "removed in Kubernetes 1.25 (use policy/v1)",
  "batch/v1beta1": "removed in Kubernetes 1.25 (use batch/v1)",
  "autoscaling/v2beta1": "removed in Kubernetes 1.25 (use autoscaling/v2)",
  "autoscaling/v2beta2": "removed in Kubernetes 1.26 (use autoscaling/v2)",
  "discovery.k8s.io/v1beta1": "removed in Kubernetes 1.25 (use discovery.k8s.io/v1)",
  "rbac.authorization.k8s.io/v1beta1": "removed in Kubernetes 1.22 (use rbac.authorization.k8s.io/v1)",
  "flowcontrol.apiserver.k8s.io/v1beta1": "removed in Kubernetes 1.25",
  "storage.k8s.io/v1beta1": "removed in Kubernetes 1.22 (use storage.k8s.io/v1)",
  "scheduling.k8s.io/v1beta1": "removed in Kubernetes 1.22 (use scheduling.k8s.io/v1)",
};

// apiVersion/kind -> model class, from every group/version module the packages export.
async function loadModels() {
  const models = new Map();
  for (const pkg of [
    "kubernetes-models",
    "@kubernetes-models/prometheus-operator",
    "@kubernetes-models/cert-manager",
    "@kubernetes-models/keda",
    "@kubernetes-models/gateway-api",
  ]) {
    const exportsMap = require(`${pkg}/package.json`).exports;
    for (const key of Object.keys(exportsMap)) {
      if (key === "." || key.includes("*") || key.endsWith(".json")) continue;
      const mod = await import(`${pkg}/${key.slice(2)}`);
      for (const value of Object.values(mod)) {
        if (typeof value === "function" && value.apiVersion && value.kind) {
          models.set(`${value.apiVersion}/${value.kind}`, value);
        }
      }
    }
  }
  return models;
}

function formatPath(pointer) {
  return (
    pointer
      .split("/")
      .slice(1)
      .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
      .map((s) => (/^\d+$/.test(s) ? `[${s}]` : /^[A-Za-z0-9_-]+$/.test(s) ? `.${s}` : `["${s}"]`))
      .join("")
      .replace(/^\./, "") || "(root)"
  );
}

// Runs the model's compiled schema validator on a proxy of the object that records which keys the
// validator reads. The validators read every property their schema defines (and every key of a
// map-typed field), so a key left unread in an object where some key was read is not in the
// schema. Objects with no key read are free-form (e.g. x-kubernetes-preserve-unknown-fields).
function validateObject(Model, obj) {
  const reads = new Map();
  const wrap = (value) => {
    if (value === null || typeof value !== "object") return value;
    if (!Array.isArray(value)) reads.set(value, new Set());
    return new Proxy(value, {
      get(target, prop, receiver) {
        if (typeof prop === "string" && !Array.isArray(target)) reads.get(target).add(prop);
        return wrap(Reflect.get(target, prop, receiver));
      },
    });
  };
  const problems = [];
  try {
    Model.prototype.validate.call(wrap(obj));
  } catch (err) {
    if (!Array.isArray(err.errors)) throw err;
    for (const e of err.errors) problems.push(`${formatPath(e.instancePath)}: ${e.message}`);
  }
  const walk = (value, pointer) => {
    if (value === null || typeof value !== "object") return;
    if (Array.isArray(value)) return value.forEach((v, i) => walk(v, `${pointer}/${i}`));
    const read = reads.get(value);
    for (const key of Object.keys(value)) {
      const child = `${pointer}/${key.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      if (read && read.size > 0 && !read.has(key)) problems.push(`${formatPath(child)}: unknown field`);
      else walk(value[key], child);
    }
  };
  walk(obj, "");
  return problems;
}

function checkDocument(models, obj) {
  if (obj === null || obj === undefined) return { id: null, problems: [] };
  if (typeof obj !== "object" || Array.isArray(obj)) {
    return { id: "(document)", problems: ["(root): not a mapping"] };
  }
  const id = `${obj.kind ?? "(no kind)"}/${obj.metadata?.name ?? "(no name)"}`;
  if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
    return { id, problems: ["(root): apiVersion and kind are required"] };
  }
  if (REMOVED[obj.apiVersion]) {
    return { id, problems: [`apiVersion: ${obj.apiVersion} is ${REMOVED[obj.apiVersion]}`] };
  }
  const Model = models.get(`${obj.apiVersion}/${obj.kind}`);
  if (!Model) return { id, problems: [`(root): unknown kind ${obj.kind} in ${obj.apiVersion}: no schema to check it against`] };
  const problems = validateObject(Model, obj);
  if (!obj.metadata?.name && !obj.metadata?.generateName) problems.push("metadata.name: required");
  return { id, problems };
}

async function main() {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node validate.mjs MANIFEST.yaml... ('-' for standard input)");
    process.exit(2);
  }
  const models = await loadModels();
  let failures = 0;
  let checked = 0;
  for (const file of files) {
    const text = readFileSync(file === "-" ? 0 : file, "utf8");
    // YAML 1.1, as Kubernetes reads manifests (sigs.k8s.io/yaml): `on`, `yes` are booleans.
    for (const doc of parseAllDocuments(text, { version: "1.1" })) {
      if (doc.errors.length > 0) {
        for (const e of doc.errors) console.error(`${file}: YAML: ${e.message}`);
        failures++;
        continue;
      }
      const { id, problems } = checkDocument(models, doc.toJS());
      if (id === null) continue;
      checked++;
      for (const p of problems) console.error(`${id}: ${p}`);
      if (problems.length > 0) failures++;
    }
  }
  if (failures > 0) {
    console.error(`${failures} of ${checked} objects invalid`);
    process.exit(1);
  }
  console.log(`${checked} objects valid`);
}

await main();
