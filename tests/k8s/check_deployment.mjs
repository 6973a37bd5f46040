#!/usr/bin/env node
// Asserts what a numaserve deployment promises, on rendered objects (helm
// template, kubectl kustomize): not "it renders", but
//   - every service container (init containers too: they count for the QoS
//     class) is Guaranteed with whole CPUs, so the kubelet's static CPU
//     Manager and Topology Manager can give it one NUMA node;
//   - the service runs unprivileged: non-root, no privilege escalation, no
//     added capabilities, read-only root filesystem, no host namespaces or
//     host paths (its NUMA placement comes from the kubelet's cpuset);
//   - probes on /readyz and /healthz on the admin port, which no load
//     balancer exposes; a preStop pause without a shell; a grace period that
//     covers it plus the service's own drain (read from the mounted
//     numaserve.yaml); NetworkPolicies admitting clients to the data port
//     only and monitoring to the admin port and the agent's;
//   - replicas spread across machines; Service and PDB select the pods; no
//     two Deployments select each other's pods (one per machine class);
//   - a class's Service selects that class's pods only, and an HTTPRoute
//     weighs each class's Service by its CPUs (replica CPUs x replicas);
//   - the agent mounts only what it reads (read-only) and writes, tolerates
//     no taint wholesale, and its RBAC grants exactly what it uses.
//
//   node check_deployment.mjs [--replicas N] FILE...
// Exit status: 0 all promises hold, 1 otherwise (each broken one printed).
import fs from "node:fs";
import path from "node:path";
import { parseAllDocuments, parse } from "yaml";
import { bytes, millis } from "./quantities.mjs";

const argv = process.argv.slice(2);
let expectedReplicas = null;
let expectNoPolicy = false;  // --no-network-policy: the render turned them off
const files = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--replicas") expectedReplicas = Number(argv[++i]);
  else if (argv[i] === "--no-network-policy") expectNoPolicy = true;
  else files.push(argv[i]);
}
const objects = files.flatMap((f) => parseAllDocuments(fs.readFileSync(f, "utf8")).map((d) => d.toJS())).filter(Boolean);
const failures = [];
const fail = (what, message) => failures.push(`${what}: ${message}`);
const byKind = (kind) => objects.filter((o) => o.kind === kind);

// What kube/apiserver sends: server-side apply (PATCH) of the
// node's labels and of the NodeResourceTopology, whose first apply creates it.
const AGENT_USES = new Set(["/nodes/patch", "topology.node.k8s.io/noderesourcetopologies/create",
  "topology.node.k8s.io/noderesourcetopologies/patch"]);

function seconds(duration) {
  const units = { ns: 1e-9, us: 1e-6, "µs": 1e-6, ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  for (const [, n, u] of String(duration).matchAll(/([0-9.]+)(ns|us|µs|ms|s|m|h)/g)) total += Number(n) * units[u];
  return total;
}
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

// Pod Security Standards, "restricted" (Kubernetes 1.30), the checks a pod
// spec can fail: host namespaces and ports, privileged, capabilities beyond
// dropping ALL (NET_BIND_SERVICE may be added), volume types, privilege
// escalation, non-root, seccomp, sysctls, /proc mount, AppArmor, SELinux.
function restrictedViolations(pod) {
  const out = [];
  const allowedVolumes = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
  for (const v of pod.volumes ?? []) {
    const type = Object.keys(v).find((k) => k !== "name");
    if (!allowedVolumes.includes(type)) out.push(`volume ${v.name} is ${type}`);
  }
  for (const ns of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[ns]) out.push(`${ns}`);
  const podSc = pod.securityContext ?? {};
  if ((podSc.sysctls ?? []).length) out.push("sets sysctls");
  const runtime = (p) => ["RuntimeDefault", "Localhost"].includes(p?.type);
  for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
    const sc = c.securityContext ?? {};
    const here = `container ${c.name}`;
    if (sc.privileged) out.push(`${here} is privileged`);
    if ((c.ports ?? []).some((p) => p.hostPort)) out.push(`${here} uses a host port`);
    if (sc.allowPrivilegeEscalation !== false) out.push(`${here} may escalate`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) out.push(`${here} does not drop ALL capabilities`);
    if ((sc.capabilities?.add ?? []).some((cap) => cap !== "NET_BIND_SERVICE")) out.push(`${here} adds capabilities`);
    if ((sc.runAsNonRoot ?? podSc.runAsNonRoot) !== true) out.push(`${here} may run as root`);
    if ((sc.runAsUser ?? podSc.runAsUser) === 0) out.push(`${here} runs as uid 0`);
    if (!runtime(sc.seccompProfile ?? podSc.seccompProfile)) out.push(`${here} has no RuntimeDefault/Localhost seccomp profile`);
    if (sc.procMount && sc.procMount !== "Default") out.push(`${here} unmasks /proc`);
    if ((sc.appArmorProfile ?? podSc.appArmorProfile)?.type === "Unconfined") out.push(`${here} is AppArmor-unconfined`);
    const selinux = (sc.seLinuxOptions ?? podSc.seLinuxOptions)?.type;
    if (selinux && !["container_t", "container_init_t", "container_kvm_t", "container_engine_t"].includes(selinux))
      out.push(`${here} sets SELinux type ${selinux}`);
  }
  return out;
}

// The topology operator's ServingPool holds the service's pod template: its
// Deployments, one per machine class, are the operator's (made in the
// cluster, not rendered), so the template is checked as theirs.
const pools = objects.filter((o) => o.kind === "ServingPool").map((p) => ({ ...p, spec: { template: p.spec.template } }));
const workloads = objects.filter((o) => ["Deployment", "StatefulSet", "DaemonSet"].includes(o.kind));
const agents = workloads.filter((o) => o.kind === "DaemonSet");
const component = (o) => o.metadata.labels?.["app.kubernetes.io/component"];
const operators = workloads.filter((o) => component(o) === "topology-operator");
const services = [...workloads.filter((o) => o.kind !== "DaemonSet" && component(o) !== "topology-operator"), ...pools];
if (services.length === 0) fail("render", "no service workload");

for (const w of services) {
  const what = `${w.kind}/${w.metadata.name}`;
  const pod = w.spec.template.spec;
  const podLabels = w.spec.template.metadata?.labels ?? {};
  if (expectedReplicas !== null && w.kind !== "ServingPool" && w.spec.replicas !== expectedReplicas)
    fail(what, `replicas ${w.spec.replicas}, expected ${expectedReplicas}`);
  if (!Number.isInteger(w.spec.replicas ?? 0) || (w.spec.replicas ?? 0) < 0) fail(what, "replicas is not a count");

  for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
    const here = `${what} container ${c.name}`;
    const { requests = {}, limits = {} } = c.resources ?? {};
    for (const r of ["cpu", "memory"]) {
      if (requests[r] === undefined || limits[r] === undefined) fail(here, `${r} request and limit are required (Guaranteed QoS)`);
    }
    if (millis(requests.cpu) !== millis(limits.cpu)) fail(here, `cpu request ${requests.cpu} != limit ${limits.cpu}`);
    if (bytes(requests.memory) !== bytes(limits.memory)) fail(here, `memory request ${requests.memory} != limit ${limits.memory}`);
    const cpu = millis(limits.cpu);
    // The service (and the init container, sized like it) gets exclusive
    // CPUs: whole ones. A sidecar (the model puller) stays Guaranteed with
    // a fraction, in the shared pool, off the service's CPUs.
    const sidecar = pod.containers.includes(c) && c.name !== "numaserve";
    if (!sidecar && !(cpu >= 1000 && cpu % 1000 === 0)) fail(here, `cpu ${limits.cpu} is not a whole number of CPUs`);
    if (sidecar && cpu % 1000 === 0) fail(here, `cpu ${limits.cpu}: a whole CPU would be pinned exclusively for a sidecar`);
    const sc = c.securityContext ?? {};
    if (sc.privileged) fail(here, "privileged");
    if (sc.allowPrivilegeEscalation !== false) fail(here, "allowPrivilegeEscalation is not false");
    if ((sc.capabilities?.add ?? []).length) fail(here, `adds capabilities ${sc.capabilities.add}`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(here, "does not drop ALL capabilities");
    if (sc.readOnlyRootFilesystem !== true) fail(here, "root filesystem is writable");
    if ((sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot) !== true) fail(here, "may run as root");
    if ((sc.runAsUser ?? pod.securityContext?.runAsUser) === 0) fail(here, "runs as root");
  }
  for (const ns of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[ns]) fail(what, `${ns} is on`);
  for (const v of pod.volumes ?? []) if (v.hostPath) fail(what, `volume ${v.name} is a hostPath`);
  for (const v of restrictedViolations(pod)) fail(what, `Pod Security "restricted" would refuse it: ${v}`);

  const main = pod.containers[0];
  if (main.readinessProbe?.httpGet?.path !== "/readyz") fail(what, "readiness probe is not GET /readyz");
  if (main.livenessProbe?.httpGet?.path !== "/healthz") fail(what, "liveness probe is not GET /healthz");
  const preStop = main.lifecycle?.preStop;
  if (preStop?.exec) fail(what, "preStop runs a command: the image has no shell and no sleep (use the kubelet's sleep)");
  const preStopSeconds = preStop?.sleep?.seconds ?? 0;
  const portOf = (name) => main.ports?.find((p) => p.name === name)?.containerPort;

  // The service's drain, from the numaserve.yaml it is given.
  const configMount = main.volumeMounts?.find((m) => main.args?.some((a) => a.startsWith(m.mountPath + "/")));
  const configVolume = pod.volumes?.find((v) => v.name === configMount?.name);
  const configMap = byKind("ConfigMap").find((m) => m.metadata.name === configVolume?.configMap?.name);
  const config = configMap ? parse(Object.values(configMap.data)[0]) : null;
  if (!config) fail(what, "its --config file does not come from a ConfigMap in the render");
  else {
    const drain = seconds(config.shutdown_grace ?? "30s") + seconds(config.shutdown_delay ?? "0s");
    if (preStopSeconds + seconds(config.shutdown_delay ?? "0s") === 0)
      fail(what, "no pause before the port closes (preStop sleep or shutdown_delay): endpoints would still send to a stopping pod");
    if (config.admin_port === undefined || portOf("admin") !== config.admin_port) fail(what, "no admin port, or not the one numaserve.yaml names");
    for (const [kind, probe] of [["startup", main.startupProbe], ["liveness", main.livenessProbe], ["readiness", main.readinessProbe]])
      if (probe && probe.httpGet?.port !== "admin" && probe.httpGet?.port !== config.admin_port) fail(what, `the ${kind} probe is not on the admin port`);
    const grace = pod.terminationGracePeriodSeconds ?? 30;
    if (grace < preStopSeconds + drain)
      fail(what, `terminationGracePeriodSeconds ${grace} < preStop ${preStopSeconds}s + drain ${drain}s: the kubelet would SIGKILL a draining pod`);
    if (!config.model_dir?.length && !config.model_repository) fail(what, "numaserve.yaml names no model");
  }

  const spread = (pod.topologySpreadConstraints ?? []).some((t) => t.topologyKey === "kubernetes.io/hostname" && matches(t.labelSelector?.matchLabels, podLabels));
  const anti = (pod.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? []).some((t) => t.topologyKey === "kubernetes.io/hostname");
  if (!spread && !anti) fail(what, "replicas are not spread across machines");
  for (const t of pod.topologySpreadConstraints ?? []) {
    if (t.whenUnsatisfiable === "DoNotSchedule" && (t.nodeTaintsPolicy !== "Honor" || (t.nodeAffinityPolicy ?? "Honor") !== "Honor"))
      fail(what, "a spread rule counts nodes the pod cannot use (tainted or unplanned), keeping the minimum at 0");
  }
  if (!byKind("Service").some((s) => Object.keys(s.spec.selector ?? {}).length && matches(s.spec.selector, podLabels)))
    fail(what, "no Service selects its pods");
  for (const s of byKind("Service").filter((s) => matches(s.spec.selector, podLabels))) {
    const exposed = ["LoadBalancer", "NodePort"].includes(s.spec.type);
    if (exposed && s.spec.ports.some((p) => p.targetPort === "admin" || p.targetPort === portOf("admin")))
      fail(`Service/${s.metadata.name}`, "exposes the admin port (metrics, the host's layout) outside the cluster");
  }
  // Network policy: clients reach the data port, monitoring the admin port.
  const policies = byKind("NetworkPolicy").filter((p) => matches(p.spec.podSelector?.matchLabels, podLabels));
  if (policies.length) {
    const admits = (port) => policies.flatMap((p) => p.spec.ingress ?? []).filter((r) => (r.ports ?? []).some((q) => q.port === port));
    if (!admits("http").length) fail(what, "its NetworkPolicy admits no client to the data port");
    if (admits("admin").some((r) => !r.from?.length)) fail(what, "its NetworkPolicy admits anyone to the admin port");
    if (policies.flatMap((p) => p.spec.ingress ?? []).some((r) => !r.ports?.length)) fail(what, "its NetworkPolicy admits every port");
  } else if (!expectNoPolicy) {
    fail(what, "no NetworkPolicy selects its pods");
  }
  const pdbs = byKind("PodDisruptionBudget");
  if (pdbs.length && !pdbs.some((pdb) => matches(pdb.spec.selector.matchLabels, podLabels)))
    fail(what, "no PodDisruptionBudget covers its pods");
  // Deployments whose selectors match each other's pods fight over them
  // (each ReplicaSet counts the other's pods as its own).
  for (const other of services.filter((o) => o !== w && matches(o.spec.selector.matchLabels, podLabels)))
    fail(what, `its pods are also selected by ${other.kind}/${other.metadata.name}`);
}
// Traffic that follows capacity: a Service of a machine class selects the
// pods of that class's Deployment and no other's; an HTTPRoute's backends
// are Services, each weighted by the CPUs its pods are sized for.
const CLASS = "numaserve.io/machine-class";
const podsOf = (s) => services.filter((w) => w.kind === "Deployment" && matches(s.spec.selector, w.spec.template.metadata?.labels));
for (const s of byKind("Service").filter((s) => s.metadata.labels?.[CLASS])) {
  const selected = podsOf(s);
  if (selected.length !== 1 || selected[0].metadata.labels?.[CLASS] !== s.metadata.labels[CLASS])
    fail(`Service/${s.metadata.name}`, `selects the pods of ${selected.map((w) => w.metadata.name).join(", ") || "no Deployment"}, not its class's alone`);
}
for (const route of byKind("HTTPRoute")) {
  const what = `HTTPRoute/${route.metadata.name}`;
  if (!route.spec.parentRefs?.length) fail(what, "has no parent (Gateway or Service)");
  for (const b of (route.spec.rules ?? []).flatMap((r) => r.backendRefs ?? [])) {
    const service = byKind("Service").find((s) => s.metadata.name === b.name);
    if (!service) { fail(what, `backend ${b.name} is no Service of the render`); continue; }
    if (!service.spec.ports.some((p) => p.port === b.port)) fail(what, `backend ${b.name}: no port ${b.port}`);
    const [w, ...others] = podsOf(service);
    if (!w || others.length || b.weight === undefined) continue;  // the all-classes Service: one size, no weight
    const main = w.spec.template.spec.containers.find((c) => c.name === "numaserve") ?? w.spec.template.spec.containers[0];
    const cpus = millis(main.resources.limits.cpu) / 1000 * (w.spec.replicas ?? 0);
    if (b.weight !== cpus) fail(what, `backend ${b.name} weighs ${b.weight}, its pods serve with ${cpus} CPUs`);
  }
}
for (const pdb of byKind("PodDisruptionBudget"))
  if (!services.some((w) => matches(pdb.spec.selector.matchLabels, w.spec.template.metadata?.labels)))
    fail(`PodDisruptionBudget/${pdb.metadata.name}`, "selects no service pod");

// The operator: an ordinary restricted pod, no host access.
for (const o of operators) {
  const what = `Deployment/${o.metadata.name}`;
  const pod = o.spec.template.spec;
  for (const v of restrictedViolations(pod)) fail(what, `Pod Security "restricted" would refuse it: ${v}`);
  for (const c of pod.containers)
    if (c.securityContext?.readOnlyRootFilesystem !== true) fail(what, "root filesystem is writable");
  if (!pools.length) fail(what, "an operator without a ServingPool to serve");
}

for (const d of agents) {
  const what = `DaemonSet/${d.metadata.name}`;
  const pod = d.spec.template.spec;
  if ((pod.tolerations ?? []).some((t) => t.operator === "Exists" && !t.key))
    fail(what, "tolerates every taint: it would run, as root, on control-plane nodes too");
  if (pod.hostNetwork || pod.hostPID || pod.hostIPC) fail(what, "shares a host namespace");
  const hostPaths = new Map((pod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath.path]));
  for (const c of pod.containers) {
    const sc = c.securityContext ?? {};
    if (sc.privileged || sc.allowPrivilegeEscalation !== false) fail(what, "may escalate privileges");
    if ((sc.capabilities?.add ?? []).length || !(sc.capabilities?.drop ?? []).includes("ALL")) fail(what, "keeps capabilities");
    if (sc.readOnlyRootFilesystem !== true) fail(what, "root filesystem is writable");
    // Least privilege: each host path mounted is one the agent is told to
    // read (read-only, at /host + its host path) or to write.
    const arg = (flag) => c.args?.find((x) => x.startsWith(`${flag}=`))?.slice(flag.length + 1);
    const socket = arg("--podresources-socket");
    const reads = new Set(["/host/sys", "/host/proc/sys/kernel", arg("--kubelet-config"), arg("--kubelet-state-dir"),
      socket && path.posix.dirname(socket)].filter(Boolean));
    const writes = new Set([arg("--hints-dir"), arg("--kubelet-dropin-dir")].filter(Boolean));
    if (!socket) fail(what, "does not ask the kubelet's PodResources API");
    for (const m of c.volumeMounts ?? []) {
      const hostPath = hostPaths.get(m.name);
      if (!hostPath) continue;
      if (writes.has(m.mountPath)) continue;
      if (!reads.has(m.mountPath)) fail(what, `mounts host path ${hostPath}, which it neither reads nor writes`);
      else if (!m.readOnly) fail(what, `host path ${hostPath} is mounted writable but is not where the agent writes`);
      else if (m.mountPath.startsWith("/host/") && m.mountPath !== `/host${hostPath}`)
        fail(what, `${m.mountPath} is host path ${hostPath}, not what it claims`);
      else if (m.mountPath === (socket && path.posix.dirname(socket)) && !hostPath.endsWith("/pod-resources"))
        fail(what, `the PodResources socket's directory is ${hostPath}, not the kubelet's pod-resources`);
    }
    const socketMount = socket && (c.volumeMounts ?? []).find((m) => m.mountPath === path.posix.dirname(socket));
    if (socket && !socketMount) fail(what, "does not mount the directory of the PodResources socket it asks");
  }
  // Network policy: only monitoring reaches its endpoint.
  const agentLabels = d.spec.template.metadata.labels;
  const agentPolicies = byKind("NetworkPolicy").filter((p) => matches(p.spec.podSelector?.matchLabels, agentLabels));
  if (!agentPolicies.length && !expectNoPolicy) fail(what, "no NetworkPolicy selects its pods (its /topology would be open to every pod)");
  for (const r of agentPolicies.flatMap((p) => p.spec.ingress ?? []))
    if (!r.from?.length || !r.ports?.length) fail(what, "its NetworkPolicy admits anyone, or to every port");
  // RBAC: everything bound to its service account, against what it sends.
  const account = pod.serviceAccountName;
  if (!account || !byKind("ServiceAccount").some((s) => s.metadata.name === account)) fail(what, "has no ServiceAccount of its own");
  const publishes = !pod.containers[0].args?.includes("--no-apiserver");
  const roleNames = [...byKind("ClusterRoleBinding"), ...byKind("RoleBinding")]
    .filter((b) => b.subjects?.some((s) => s.kind === "ServiceAccount" && s.name === account))
    .map((b) => `${b.roleRef.kind}/${b.roleRef.name}`);
  const granted = new Set();
  for (const role of [...byKind("ClusterRole"), ...byKind("Role")].filter((r) => roleNames.includes(`${r.kind}/${r.metadata.name}`))) {
    for (const rule of role.rules ?? []) {
      if (rule.nonResourceURLs) fail(`${role.kind}/${role.metadata.name}`, "grants non-resource URLs");
      for (const g of rule.apiGroups ?? []) for (const r of rule.resources ?? []) for (const v of rule.verbs ?? []) granted.add(`${g}/${r}/${v}`);
    }
  }
  for (const g of granted) if (!AGENT_USES.has(g)) fail(what, `RBAC grants ${g}, which the agent never uses`);
  if (publishes) for (const u of AGENT_USES) if (!granted.has(u)) fail(what, `RBAC lacks ${u}, which the agent needs to publish`);
  if (!publishes && pod.automountServiceAccountToken !== false) fail(what, "mounts an API token it does not use");
}

for (const f of failures) console.error(`FAIL ${f}`);
console.log(`${services.length} service workload(s), ${agents.length} agent(s): ${failures.length ? `${failures.length} broken promise(s)` : "all promises hold"}`);
process.exit(failures.length ? 1 : 0);
