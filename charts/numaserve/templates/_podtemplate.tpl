{{- /*
The service's pod template, for the chart's own Deployments and for the
ServingPool the topology operator serves. Called with dict "root" (the
chart's context) "class" (one of numaserve.classes; the operator's pool: a
class without a name, whose resources the operator sizes per class).
*/ -}}
{{- define "numaserve.podTemplate" -}}
{{- $root := .root -}}
{{- $class := .class -}}
{{- $fullname := include "numaserve.fullname" $root -}}
{{- $source := $root.Values.model.source -}}
{{- $model := $root.Values.model -}}
{{- if and $model.repository $model.versionMemory (ne $model.controlMode "none") (ne (toString ($root.Values.config.reload_policy | default "availability")) "resource") -}}
{{- $limit := include "numaserve.mebibytes" (dict "quantity" $class.resources.limits.memory "field" (printf "%s.limits.memory" $class.field)) | atoi -}}
{{- $version := include "numaserve.mebibytes" (dict "quantity" $model.versionMemory "field" "model.versionMemory") | atoi -}}
{{- if lt $limit (mul 2 $version) -}}
{{- fail (printf "values: %s.limits.memory (%v) must hold two versions of model.versionMemory (%v): with reload_policy availability a new version loads beside the old; raise it, or set config.reload_policy: resource" $class.field $class.resources.limits.memory $model.versionMemory) -}}
{{- end -}}
{{- end -}}
metadata:
  labels:
    {{- include "numaserve.classSelectorLabels" (dict "root" $root "class" $class) | nindent 4 }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- with $root.Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with $root.Values.schedulerName }}
  schedulerName: {{ . }}
  {{- end }}
  {{- with $root.Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ include "numaserve.terminationGracePeriodSeconds" $root }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  # Only nodes the pod may use count as spread domains (Honor): a tainted
  # control-plane node or a node the agent has not planned, holding zero
  # replicas, would otherwise keep the minimum at 0 and block every
  # machine's second replica.
  topologySpreadConstraints:
    - maxSkew: {{ $root.Values.topologySpread.maxSkew }}
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
      nodeAffinityPolicy: Honor
      nodeTaintsPolicy: Honor
      labelSelector:
        matchLabels:
          {{- include "numaserve.classSelectorLabels" (dict "root" $root "class" $class) | nindent 10 }}
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "numaserve.affinity" (dict "root" $root "class" $class) | fromYaml }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq $source "initContainer" }}
  initContainers:
    - name: model
      image: {{ required "values: model.initContainer.image is required with model.source=initContainer" $root.Values.model.initContainer.image }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      {{- with $root.Values.model.initContainer.command }}
      command:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # An init container counts for the pod's QoS class too.
      resources:
        {{- include "numaserve.resources" $class | nindent 8 }}
      securityContext:
        {{- include "numaserve.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        - name: models
          mountPath: {{ $root.Values.model.initContainer.mountPath }}
        - name: tmp
          mountPath: /tmp
  {{- end }}
  containers:
    - name: numaserve
      image: {{ include "numaserve.image" (dict "image" $root.Values.image "chart" $root.Chart) }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args: [serve, --config, /etc/numaserve/numaserve.yaml]
      ports:
        - name: http
          containerPort: {{ $root.Values.service.port }}
          protocol: TCP
        - name: admin
          containerPort: {{ $root.Values.service.adminPort }}
          protocol: TCP
        {{- with $root.Values.service.grpcPort }}
        - name: grpc
          containerPort: {{ . }}
          protocol: TCP
        {{- end }}
      resources:
        {{- include "numaserve.resources" $class | nindent 8 }}
      securityContext:
        {{- include "numaserve.containerSecurityContext" . | nindent 8 }}
      # Probes on the admin port: the data port's queue and connection
      # limits never make a live replica look dead.
      startupProbe:
        httpGet:
          path: /healthz
          port: admin
        periodSeconds: 5
        # Liveness's 3 s, not the default 1 s: a node busy starting pods (a
        # warm-up forward on the worker's loop) answers late, not never.
        timeoutSeconds: 3
        failureThreshold: {{ max 1 (div $root.Values.probes.startupSeconds 5) }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: admin
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: admin
        periodSeconds: 5
        timeoutSeconds: 3
        failureThreshold: 2
      # The kubelet's own sleep (Kubernetes 1.30+): the image has no shell
      # and no sleep binary.
      {{- if gt (int $root.Values.shutdown.preStopSeconds) 0 }}
      lifecycle:
        preStop:
          sleep:
            seconds: {{ $root.Values.shutdown.preStopSeconds }}
      {{- end }}
      volumeMounts:
        - name: config
          mountPath: /etc/numaserve
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- if ne $source "image" }}
        - name: models
          mountPath: {{ $root.Values.model.path }}
          readOnly: true
        {{- end }}
    {{- with $root.Values.model.puller }}
    {{- if .image }}
    {{- if ne $source "initContainer" }}{{- fail "values: model.puller needs model.source=initContainer (an emptyDir it can write)" -}}{{- end }}
    - name: model-puller
      image: {{ .image }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      {{- with .command }}
      command:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- include "numaserve.resources" (dict "resources" .resources "field" "model.puller.resources") | nindent 8 }}
      securityContext:
        {{- include "numaserve.containerSecurityContext" $ | nindent 8 }}
      volumeMounts:
        - name: models
          mountPath: {{ $root.Values.model.initContainer.mountPath }}
        - name: tmp
          mountPath: /tmp
    {{- end }}
    {{- end }}
        {{- if $root.Values.featureStore.passwordSecret.name }}
        - name: redis-password
          mountPath: /var/run/secrets/numaserve/redis
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ $fullname }}
    {{- with $root.Values.featureStore.passwordSecret }}
    {{- if .name }}
    - name: redis-password
      secret:
        secretName: {{ .name }}
        defaultMode: 0440
        items:
          - key: {{ .key }}
            path: password
    {{- end }}
    {{- end }}
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if eq $source "pvc" }}
    - name: models
      persistentVolumeClaim:
        claimName: {{ required "values: model.pvc.claimName is required with model.source=pvc" $root.Values.model.pvc.claimName }}
        readOnly: true
    {{- else if eq $source "initContainer" }}
    - name: models
      emptyDir:
        sizeLimit: {{ $root.Values.model.initContainer.sizeLimit }}
    {{- end }}
{{- end -}}
