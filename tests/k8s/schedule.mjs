#!/usr/bin/env node
// Schedules a rendered Deployment's replicas, one at a time, onto a
// described cluster by the kube-scheduler's filter rules, and fails unless
// every replica is placed, each on a node the agent planned, none beyond the
// node's planned slots (numaserve.io/replicas).
//
//   node schedule.mjs RENDER.yaml CLUSTER.yaml [--expect-pending]
//
// Rules applied, as kube-scheduler's filter plugins (Kubernetes 1.33) apply them:
// - NodeUnschedulable: spec.unschedulable nodes are skipped.
// - TaintToleration: every NoSchedule/NoExecute taint must be tolerated
//   (key/operator Equal|Exists/value/effect); PreferNoSchedule only scores.
// - NodeAffinity: nodeSelector labels all equal, and one of the required
//   nodeSelectorTerms matches (matchExpressions ANDed: In, NotIn, Exists,
//   DoesNotExist, Gt, Lt; matchFields on metadata.name).
// - NodeResourcesFit: requests of the pods placed plus this one within
//   allocatable cpu, memory and pods.
// - PodTopologySpread, DoNotSchedule constraints: the domains are the values
//   of topologyKey on the nodes that have it and, with nodeAffinityPolicy
//   Honor (the default), match the pod's nodeSelector and required affinity,
//   and, with nodeTaintsPolicy Honor (default Ignore), whose taints the pod
//   tolerates; a domain's count is the pods matching labelSelector on those
//   nodes; the candidate's count + 1 - the minimum count over the domains
//   (0 when minDomains exceeds the number of domains) must not exceed maxSkew.
// Scoring is not modelled: among the feasible nodes the one with the fewest
// matching pods is taken (ties by name), one valid outcome of the scores.
import fs from "node:fs";
import { parseAllDocuments, parse } from "yaml";
import { bytes, millis } from "./quantities.mjs";

const [renderFile, clusterFile, ...flags] = process.argv.slice(2);
const expectPending = flags.includes("--expect-pending");
const objects = parseAllDocuments(fs.readFileSync(renderFile, "utf8")).map((d) => d.toJS()).filter(Boolean);
const deployment = objects.find((o) => o.kind === "Deployment");
const nodes = parse(fs.readFileSync(clusterFile, "utf8")).map((n) => ({
  ...n,
  labels: { ...(n.labels ?? {}), "kubernetes.io/hostname": n.name },
  taints: n.taints ?? [],
  pods: [],
}));
const pod = deployment.spec.template.spec;
const podLabels = deployment.spec.template.metadata.labels;
const requests = pod.containers.reduce(
  (sum, c) => ({
    cpu: sum.cpu + millis(c.resources?.requests?.cpu ?? 0),
    memory: sum.memory + bytes(c.resources?.requests?.memory ?? 0),
  }),
  { cpu: 0, memory: 0 },
);

const tolerates = (taint) =>
  (pod.tolerations ?? []).some(
    (t) =>
      (!t.key || t.key === taint.key) &&
      (t.operator === "Exists" ? true : (t.value ?? "") === (taint.value ?? "")) &&
      (!t.key ? t.operator === "Exists" : true) &&
      (!t.effect || t.effect === taint.effect),
  );
const taintsTolerated = (node) =>
  node.taints.filter((t) => t.effect === "NoSchedule" || t.effect === "NoExecute").every(tolerates);

function expressionMatches(e, value) {
  switch (e.operator) {
    case "In": return value !== undefined && e.values.includes(value);
    case "NotIn": return value === undefined || !e.values.includes(value);
    case "Exists": return value !== undefined;
    case "DoesNotExist": return value === undefined;
    case "Gt": return value !== undefined && Number(value) > Number(e.values[0]);
    case "Lt": return value !== undefined && Number(value) < Number(e.values[0]);
    default: throw new Error(`unknown operator ${e.operator}`);
  }
}
function affinityMatches(node) {
  if (!Object.entries(pod.nodeSelector ?? {}).every(([k, v]) => node.labels[k] === v)) return false;
  const terms = pod.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (!terms) return true;
  return terms.some(
    (term) =>
      (term.matchExpressions ?? []).every((e) => expressionMatches(e, node.labels[e.key])) &&
      (term.matchFields ?? []).every((e) => expressionMatches(e, e.key === "metadata.name" ? node.name : undefined)),
  );
}
const matchesSelector = (selector, labels) =>
  Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v);

function fits(node) {
  const used = node.pods.length;
  return (
    used * requests.cpu + requests.cpu <= millis(node.allocatable.cpu) &&
    used * requests.memory + requests.memory <= bytes(node.allocatable.memory) &&
    used + 1 <= Number(node.allocatable.pods ?? 110)
  );
}

function spreadAllows(node) {
  for (const c of pod.topologySpreadConstraints ?? []) {
    if (c.whenUnsatisfiable !== "DoNotSchedule") continue;
    if (node.labels[c.topologyKey] === undefined) return false;
    const eligible = nodes.filter(
      (n) =>
        n.labels[c.topologyKey] !== undefined &&
        ((c.nodeAffinityPolicy ?? "Honor") !== "Honor" || affinityMatches(n)) &&
        ((c.nodeTaintsPolicy ?? "Ignore") !== "Honor" || taintsTolerated(n)),
    );
    const counts = new Map();
    for (const n of eligible) {
      const domain = n.labels[c.topologyKey];
      counts.set(domain, (counts.get(domain) ?? 0) + n.pods.filter((p) => matchesSelector(c.labelSelector, p)).length);
    }
    let min = Math.min(...counts.values());
    if (c.minDomains && counts.size < c.minDomains) min = 0;
    const self = matchesSelector(c.labelSelector, podLabels) ? 1 : 0;
    if ((counts.get(node.labels[c.topologyKey]) ?? 0) + self - min > c.maxSkew) return false;
  }
  return true;
}

const feasible = (node) => !node.unschedulable && taintsTolerated(node) && affinityMatches(node) && fits(node) && spreadAllows(node);

const replicas = deployment.spec.replicas ?? 1;
let pending = 0;
for (let i = 0; i < replicas; i++) {
  const candidates = nodes.filter(feasible).sort((a, b) => a.pods.length - b.pods.length || a.name.localeCompare(b.name));
  if (!candidates.length) {
    pending++;
    continue;
  }
  candidates[0].pods.push(podLabels);
}

const problems = [];
if (pending) problems.push(`${pending} of ${replicas} replica(s) Pending`);
for (const n of nodes.filter((n) => n.pods.length)) {
  const slots = n.labels["numaserve.io/replicas"];
  if (slots === undefined) problems.push(`${n.pods.length} replica(s) on ${n.name}, a node the agent has not planned`);
  else if (n.pods.length > Number(slots)) problems.push(`${n.pods.length} replica(s) on ${n.name}, planned for ${slots}`);
}
console.log(`placed: ${nodes.filter((n) => n.pods.length).map((n) => `${n.name}=${n.pods.length}`).join(" ") || "none"}`);
for (const p of problems) console.log(`  ${p}`);
if (expectPending) process.exit(problems.length ? 0 : 1);
process.exit(problems.length ? 1 : 0);
