# Sourced by the node tests (host_test.sh, in_vm.sh), after ../cluster/lib.sh.

# "1,2,3" for "1-3": cpulists as PodResources and cpu_manager_state's
# readers compare them.
expand() { local r out=(); for r in ${1//,/ }; do out+=($(seq "${r%-*}" "${r#*-}")); done; local IFS=,; echo "${out[*]}"; }

# A Guaranteed pod of the pause image asking for CPU whole CPUs; SPEC, lines
# of the pod's spec (schedulerName: NAME, hostNetwork: true; each after the
# first indented by two spaces), or none.
probe_pod() {  # name cpu [spec]
  cat <<EOT
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  ${3:-}
  terminationGracePeriodSeconds: 1
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
    imagePullPolicy: Never
    resources: {requests: {cpu: "$2", memory: 64Mi}, limits: {cpu: "$2", memory: 64Mi}}
EOT
}

# Succeeds when COMMAND prints EXPECTED: for `eventually`, which runs its
# command again each time (a "$(...)" in its arguments would be expanded once).
yields() {  # expected command...
  [[ $("${@:2}") == "$1" ]]
}
has_output() { [[ -n $("$@") ]]; }  # command...
