#!/usr/bin/env node
// The chart's ValidatingAdmissionPolicy for the agent, checked offline:
// its shape (what it matches, whom, the binding that enforces it) and its
// CEL, evaluated with @bufbuild/cel (a conformance-tested CEL evaluator; the
// policy uses only standard CEL, no Kubernetes library functions) the way
// the API server applies a policy: every matchCondition true, then every
// validation must be true; an evaluation error denies (failurePolicy Fail).
//
//   node admission_policy.mjs RENDER.yaml
import fs from "node:fs";
import { run } from "@bufbuild/cel";
import { parseAllDocuments } from "yaml";

const objects = parseAllDocuments(fs.readFileSync(process.argv[2], "utf8")).map((d) => d.toJS()).filter(Boolean);
const failures = [];
const fail = (message) => failures.push(message);
const policy = objects.find((o) => o.kind === "ValidatingAdmissionPolicy");
const binding = objects.find((o) => o.kind === "ValidatingAdmissionPolicyBinding");
const account = objects.find((o) => o.kind === "ServiceAccount" && o.metadata.name.endsWith("-agent"));
if (!policy || !binding || !account) {
  console.error("FAIL the render has no ValidatingAdmissionPolicy, binding or agent ServiceAccount");
  process.exit(1);
}
if (binding.spec.policyName !== policy.metadata.name) fail("the binding names another policy");
if (!binding.spec.validationActions?.includes("Deny")) fail("the binding does not deny");
if (policy.spec.failurePolicy !== "Fail") fail("an evaluation error would admit the request");
const rules = policy.spec.matchConstraints.resourceRules;
const covers = (resource, operation) =>
  rules.some((r) => r.resources.includes(resource) && (r.operations.includes(operation) || r.operations.includes("*")));
for (const [resource, operation] of [["nodes", "UPDATE"], ["noderesourcetopologies", "CREATE"], ["noderesourcetopologies", "UPDATE"]])
  if (!covers(resource, operation)) fail(`the policy does not see ${operation} of ${resource}`);

// JSON as CEL values: objects are maps.
const cel = (v) => (Array.isArray(v) ? v.map(cel) : v && typeof v === "object" ? new Map(Object.entries(v).map(([k, x]) => [k, cel(x)])) : v);
function admit(request) {
  const input = {
    object: cel(request.object),
    oldObject: request.oldObject === undefined ? null : cel(request.oldObject),
    request: cel({ userInfo: request.userInfo, resource: { group: request.group ?? "", version: "v1", resource: request.resource }, operation: request.operation }),
  };
  try {
    for (const c of policy.spec.matchConditions ?? []) if (run(c.expression, input) !== true) return { allowed: true, why: "not the agent" };
    const variables = new Map();
    for (const v of policy.spec.variables ?? []) variables.set(v.name, run(v.expression, { ...input, variables }));
    for (const v of policy.spec.validations) if (run(v.expression, { ...input, variables }) !== true) return { allowed: false, why: v.message };
    return { allowed: true, why: "all validations hold" };
  } catch (e) {
    return { allowed: false, why: `evaluation error (failurePolicy Fail): ${e.message}` };
  }
}

const agentUser = (node) => ({
  username: `system:serviceaccount:${account.metadata.namespace}:${account.metadata.name}`,
  groups: ["system:serviceaccounts", "system:authenticated"],
  ...(node ? { extra: { "authentication.kubernetes.io/node-name": [node], "authentication.kubernetes.io/pod-name": ["agent-x"] } } : {}),
});
const node = (name, change = (n) => n) =>
  change({
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      labels: { "kubernetes.io/hostname": name, "team": "ranking", "numaserve.io/replicas": "2" },
      annotations: { "node.alpha.kubernetes.io/ttl": "0" },
      managedFields: [{ manager: "kubelet", operation: "Update" }],
    },
    spec: { podCIDR: "10.0.1.0/24" },
  });
const relabel = (labels) => (n) => ({ ...n, metadata: { ...n.metadata, labels, managedFields: [...n.metadata.managedFields, { manager: "numaserve-topology-agent", operation: "Apply" }] } });
const base = node("worker-1").metadata.labels;
const nodeUpdate = (user, name, change) => ({ userInfo: user, resource: "nodes", operation: "UPDATE", oldObject: node(name), object: node(name, change) });
const nrt = (user, name, operation) => ({
  userInfo: user, group: "topology.node.k8s.io", resource: "noderesourcetopologies", operation,
  object: { apiVersion: "topology.node.k8s.io/v1alpha2", kind: "NodeResourceTopology", metadata: { name }, zones: [] },
  ...(operation === "UPDATE" ? { oldObject: { apiVersion: "topology.node.k8s.io/v1alpha2", kind: "NodeResourceTopology", metadata: { name }, zones: [] } } : {}),
});

const cases = [
  ["the agent sets its node's numaserve.io labels", true, nodeUpdate(agentUser("worker-1"), "worker-1", relabel({ ...base, "numaserve.io/replicas": "4", "numaserve.io/smt": "true" }))],
  ["the agent removes one of its own labels", true, nodeUpdate(agentUser("worker-1"), "worker-1", relabel({ "kubernetes.io/hostname": "worker-1", team: "ranking" }))],
  ["the agent labels another node", false, nodeUpdate(agentUser("worker-1"), "worker-2", relabel({ ...node("worker-2").metadata.labels, "numaserve.io/replicas": "4" }))],
  ["a token without a node name", false, nodeUpdate(agentUser(null), "worker-1", relabel({ ...base, "numaserve.io/replicas": "4" }))],
  ["the agent changes another label", false, nodeUpdate(agentUser("worker-1"), "worker-1", relabel({ ...base, team: "batch" }))],
  ["the agent adds another label", false, nodeUpdate(agentUser("worker-1"), "worker-1", relabel({ ...base, "node-role.kubernetes.io/control-plane": "" }))],
  ["the agent removes another label", false, nodeUpdate(agentUser("worker-1"), "worker-1", relabel({ "kubernetes.io/hostname": "worker-1", "numaserve.io/replicas": "2" }))],
  ["the agent taints its node", false, nodeUpdate(agentUser("worker-1"), "worker-1", (n) => ({ ...n, spec: { ...n.spec, taints: [{ key: "x", effect: "NoSchedule" }] } }))],
  ["the agent cordons its node", false, nodeUpdate(agentUser("worker-1"), "worker-1", (n) => ({ ...n, spec: { ...n.spec, unschedulable: true } }))],
  ["the agent annotates its node", false, nodeUpdate(agentUser("worker-1"), "worker-1", (n) => ({ ...n, metadata: { ...n.metadata, annotations: { ...n.metadata.annotations, a: "b" } } }))],
  ["the agent creates its node's NodeResourceTopology", true, nrt(agentUser("worker-1"), "worker-1", "CREATE")],
  ["the agent updates its node's NodeResourceTopology", true, nrt(agentUser("worker-1"), "worker-1", "UPDATE")],
  ["the agent creates another node's NodeResourceTopology", false, nrt(agentUser("worker-1"), "worker-2", "CREATE")],
  ["another account (the kubelet) changes any label", true, nodeUpdate({ username: "system:node:worker-1", groups: ["system:nodes"] }, "worker-1", relabel({ ...base, team: "batch" }))],
  ["an agent of another release is not this policy's", true, nodeUpdate({ username: `system:serviceaccount:other:${account.metadata.name}` }, "worker-2", relabel({ team: "x" }))],
];
for (const [what, expected, request] of cases) {
  const { allowed, why } = admit(request);
  if (allowed !== expected) fail(`${what}: ${allowed ? "admitted" : "denied"} (${why}), expected ${expected ? "admitted" : "denied"}`);
  else console.log(`ok ${what}: ${allowed ? "admitted" : "denied"}${allowed ? "" : ` (${why})`}`);
}
for (const f of failures) console.error(`FAIL ${f}`);
process.exit(failures.length ? 1 : 0);
