// Whether the chart's per-class Deployments and the operator's describe the
// same objects: per machine class, the specs as the API server defaulted
// them, ownership aside — names, selectors, the labels that say who made
// them (Helm's, the operator's, the pool's) and the template's annotations
// (Helm's config checksum). Prints the classes compared, or the first
// difference as a JSON path, and exits 1.
// Usage: node same_deployments.mjs CHART.json OPERATOR.json (kubectl -o json:
// a List, or a stream of objects)
import fs from "node:fs";

const CLASS = "numaserve.io/machine-class";
const OWNERSHIP = [/^app\.kubernetes\.io\//, /^helm\.sh\//, /^numaserve\.io\/pool$/];

function objects(file) {
  const text = fs.readFileSync(file, "utf8");
  const docs = [];
  // kubectl prints several objects as one List, or one after another.
  let depth = 0, start = -1, quoted = false, escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) { if (escaped) escaped = false; else if (c === "\\") escaped = true; else if (c === '"') quoted = false; continue; }
    if (c === '"') quoted = true;
    else if (c === "{") { if (depth++ === 0) start = i; }
    else if (c === "}" && --depth === 0) docs.push(JSON.parse(text.slice(start, i + 1)));
  }
  return docs.flatMap((d) => (d.kind === "List" || d.items ? d.items : [d])).filter((d) => d.kind === "Deployment" || !d.kind);
}

function withoutOwnership(labels = {}) {
  return Object.fromEntries(Object.entries(labels).filter(([k]) => !OWNERSHIP.some((re) => re.test(k))));
}

function comparable(d) {
  const spec = structuredClone(d.spec);
  delete spec.selector;
  spec.template.metadata = { labels: withoutOwnership(spec.template.metadata?.labels) };
  for (const c of spec.template.spec.topologySpreadConstraints ?? []) {
    if (c.labelSelector?.matchLabels) c.labelSelector.matchLabels = withoutOwnership(c.labelSelector.matchLabels);
  }
  return spec;
}

function firstDifference(a, b, path = "") {
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || (a === null) !== (b === null)) {
    return `${path || "/"}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
  }
  if (a && typeof a === "object") {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) {
      const d = firstDifference(a[k], b[k], `${path}/${k}`);
      if (d) return d;
    }
    return "";
  }
  return a === b ? "" : `${path}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
}

const byClass = (list) => new Map(list.map((d) => [d.metadata.labels?.[CLASS], d]));
const chart = byClass(objects(process.argv[2]));
const operator = byClass(objects(process.argv[3]));
const classes = [...new Set([...chart.keys(), ...operator.keys()])].sort();
if (!classes.length) {
  console.log("no Deployment of a machine class on either side");
  process.exit(1);
}
for (const c of classes) {
  if (!chart.has(c) || !operator.has(c)) {
    console.log(`class ${c}: only the ${chart.has(c) ? "chart" : "operator"} has a Deployment`);
    process.exit(1);
  }
  const d = firstDifference(comparable(chart.get(c)), comparable(operator.get(c)));
  if (d) {
    console.log(`class ${c}: chart vs operator at ${d}`);
    process.exit(1);
  }
}
console.log(`${classes.length} classes, the same spec: ${classes.join(", ")}`);
