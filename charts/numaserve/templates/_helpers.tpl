{{/* Names: the release name, shortened to fit a DNS label. */}}
{{- define "numaserve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "numaserve.agentName" -}}
{{- printf "%s-agent" (include "numaserve.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /*
The agent's namespace: its own (agent.namespace) so that the service's can
enforce Pod Security "restricted" while the agent's, with its hostPath
mounts, is "privileged"; by default the release's.
*/ -}}
{{- define "numaserve.agentNamespace" -}}
{{- .Values.agent.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "numaserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "numaserve.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- /* repository@digest when a digest is given (what was built, immutably), else repository:tag. */ -}}
{{- define "numaserve.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
Guaranteed QoS needs requests = limits for cpu and memory, and the static CPU
Manager exclusive CPUs needs a whole number of them. JSON Schema cannot
compare two values, so the equality is checked here, at the same step
(helm install/template) and with the same kind of message.
Called with dict "resources" (requests and limits) "field" (their values path).
*/}}
{{- define "numaserve.resources" -}}
{{- $r := .resources -}}
{{- range $name := list "cpu" "memory" -}}
{{- if ne (toString (index $r.requests $name)) (toString (index $r.limits $name)) -}}
{{- fail (printf "values: %s.requests.%s (%v) must equal %s.limits.%s (%v): numaserve pods are Guaranteed QoS" $.field $name (index $r.requests $name) $.field $name (index $r.limits $name)) -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := $r.requests -}}
{{- if and (hasPrefix "hugepages-" $name) (ne (toString (index $r.requests $name)) (toString (index $r.limits $name | default ""))) -}}
{{- fail (printf "values: %s.requests.%s (%v) must equal %s.limits.%s: hugepages requests are limits" $.field $name (index $r.requests $name) $.field $name) -}}
{{- end -}}
{{- end -}}
requests:
{{- range $name, $value := $r.requests }}
  {{ $name }}: {{ $value | quote }}
{{- end }}
limits:
{{- range $name, $value := $r.limits }}
  {{ $name }}: {{ $value | quote }}
{{- end }}
{{- end -}}

{{- /*
The service's Deployments, one per machine class: `classes` as cluster-plan
-o helm-values writes it, or, without it, one class of the top-level nodes,
replicasPerMachine and resources (name "": the Deployment keeps the release's
name and its selector, so an existing release upgrades in place). Each:
name, field (its values path, for messages), nodes, replicasPerMachine,
resources, and the Deployment's name.
*/ -}}
{{- define "numaserve.classes" -}}
{{- $fullname := include "numaserve.fullname" . -}}
{{- $classes := list -}}
{{- if .Values.classes -}}
{{- range $i, $c := .Values.classes -}}
{{- $name := printf "%s-%s" ($fullname | trunc (int (sub 62 (len $c.name))) | trimSuffix "-") $c.name -}}
{{- $classes = append $classes (merge (dict "field" (printf "classes[%d].resources" $i) "deployment" $name) $c) -}}
{{- end -}}
{{- else -}}
{{- $classes = list (dict "name" "" "field" "resources" "deployment" $fullname "nodes" .Values.nodes
      "replicasPerMachine" .Values.replicasPerMachine "resources" .Values.resources) -}}
{{- end -}}
{{- toYaml $classes -}}
{{- end -}}

{{- /*
A class's pods: the service's selector labels and, for a named class, its
machine class, so that no two Deployments select each other's pods (their
ReplicaSets would fight) while the one Service selects them all.
*/ -}}
{{- define "numaserve.classSelectorLabels" -}}
{{- include "numaserve.selectorLabels" (dict "Chart" .root.Chart "Release" .root.Release "component" "service") }}
{{- with .class.name }}
numaserve.io/machine-class: {{ . }}
{{- end -}}
{{- end -}}

{{/* The pod's grace: preStop, then the service's drain, then a margin. */}}
{{- /*
Whole seconds, rounded up, of a duration as the schema admits one for
numaserve's options: "30s", "5m", "250ms", "1m30s" (terms summed).
*/ -}}
{{- define "numaserve.seconds" -}}
{{- $scale := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $number := regexFind "^[0-9]+([.][0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $number) (get $scale (trimPrefix $number .))) -}}
{{- end -}}
{{- $total | ceil | int -}}
{{- end -}}

{{- /*
The kubelet must not SIGKILL a draining pod: preStop, then the service's
shutdown_delay (still serving, not ready) and its drain, plus a margin for
the process to exit.
*/ -}}
{{- define "numaserve.terminationGracePeriodSeconds" -}}
{{- $delay := include "numaserve.seconds" (.Values.config.shutdown_delay | default "0s") | int -}}
{{- add .Values.shutdown.preStopSeconds $delay .Values.shutdown.drainSeconds 5 -}}
{{- end -}}

{{- /*
The pod's affinity: the user's, and with plannedNodesOnly every required
node-selector term also asks for a node the topology agent has planned (its
numaserve.io/replicas label), so replicas never land on a machine whose
kubelet was not set up for them; a class's pods, for a node of that class.
Called with dict "root" (the chart's context) "class".
*/ -}}
{{- define "numaserve.affinity" -}}
{{- $values := .root.Values -}}
{{- $affinity := deepCopy ($values.affinity | default dict) -}}
{{- $extra := list -}}
{{- if $values.plannedNodesOnly -}}
{{- $extra = append $extra (dict "key" "numaserve.io/replicas" "operator" "Exists") -}}
{{- end -}}
{{- with .class.name -}}
{{- $extra = append $extra (dict "key" "numaserve.io/machine-class" "operator" "In" "values" (list .)) -}}
{{- end -}}
{{- if $extra -}}
{{- $nodeAffinity := get $affinity "nodeAffinity" | default dict -}}
{{- $required := get $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range get $required "nodeSelectorTerms" | default (list dict) -}}
{{- $term := deepCopy . -}}
{{- $_ := set $term "matchExpressions" (concat (get $term "matchExpressions" | default list) $extra) -}}
{{- $terms = append $terms $term -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $nodeAffinity -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}

{{- define "numaserve.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
A memory quantity in whole MiB, for the reload sizing check: binary
suffixes (Ki, Mi, Gi, Ti) and plain bytes; anything else is refused with the
field's name (Helm has no quantity arithmetic).
Called with dict "quantity" "field".
*/}}
{{- define "numaserve.mebibytes" -}}
{{- $q := toString .quantity -}}
{{- $units := dict "Ki" 0 "Mi" 1 "Gi" 1024 "Ti" 1048576 -}}
{{- $out := "" -}}
{{- range $suffix, $factor := $units -}}
{{- if and (hasSuffix $suffix $q) (regexMatch "^[0-9]+$" (trimSuffix $suffix $q)) -}}
{{- $n := trimSuffix $suffix $q | atoi -}}
{{- $out = ternary (div $n 1024) (mul $n $factor) (eq $suffix "Ki") -}}
{{- end -}}
{{- end -}}
{{- if and (eq (toString $out) "") (regexMatch "^[0-9]+$" $q) -}}{{- $out = div ($q | atoi) 1048576 -}}{{- end -}}
{{- if eq (toString $out) "" -}}
{{- fail (printf "values: %s (%s) must be whole Ki, Mi, Gi, Ti or bytes for the reload sizing check" .field $q) -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/*
The data ports a Service carries: HTTP, and gRPC (HTTP/2 without TLS:
appProtocol kubernetes.io/h2c) when service.grpcPort is set. The main
Service, each class's, and the operator's pool all list these.
*/}}
{{- define "numaserve.dataPorts" -}}
- name: http
  port: {{ .Values.service.port }}
  targetPort: http
  protocol: TCP
{{- if .Values.service.grpcPort }}
- name: grpc
  port: {{ .Values.service.grpcPort }}
  targetPort: grpc
  protocol: TCP
  appProtocol: kubernetes.io/h2c
{{- end }}
{{- end }}
