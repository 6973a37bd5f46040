#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from
the repository's own fixtures and the requests the API tests send, so every
seed says where it came from. Run once; afterwards `scripts/fuzz.sh --merge`
keeps each corpus minimal. Usage: tests/fuzz/make_seeds.py"""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"


def seeds(target, items):
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    for name, data in items:
        (out / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def http_request(method, path, body=b"", extra=""):
    head = f"{method} {path} HTTP/1.1\r\nHost: numaserve\r\n{extra}"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


# The service: the API tests' /predict bodies.
predict = {"request_id": "r-1", "user": {"id": "u3", "features": {"age": 40}},
           "context": {"hour": 21, "device": "android"},
           "items": [{"id": "i1"}, {"id": "i42", "features": {"price": 9.5, "tags": ["t1", "t2"]}},
                     {"id": "not-in-store"}]}
seeds("predict_body", [
    ("full.json", json.dumps(predict)),
    ("model.json", '{"model": "ranker_b", "user": {"id": "u1"}, "items": [{"id": "i1"}]}'),
    ("numbers.json", '{"user": {"id": 7}, "items": [{"id": 2, "features": {"price": 1e-3, "hour": -3}}]}'),
    ("bad-type.json", '{"user": {"id": [1]}, "items": [{"id": "i1"}]}'),
    ("escapes.json", '{"user": {"id": "\\u00e9\\ud83d\\ude00"}, "items": [{"id": "a\\"b"}]}'),
])

# An infer body for tests/fixtures/features/model.yaml: dense [2, 3] (age,
# price, hour) and an embedding bag per id feature.
bags = [("user_id", [3, 7], [0, 1]), ("user_country", [1, 2], [0, 1]), ("item_id", [10, 4999], [0, 1]),
        ("item_tags", [1, 2, 63], [0, 2])]
inputs = [{"name": "dense", "datatype": "FP32", "shape": [2, 3], "data": [40, 9.5, 12, 31, 0, 7]}]
for stem, indices, offsets in bags:
    inputs.append({"name": stem + "_indices", "datatype": "INT64", "shape": [len(indices)], "data": indices})
    inputs.append({"name": stem + "_offsets", "datatype": "INT64", "shape": [2], "data": offsets})
seeds("infer_body", [("two-rows.json", json.dumps({"id": "v2-1", "inputs": inputs}))])

# The transport: a cut byte, then requests as clients send them.
body = json.dumps(predict).encode()
seeds("http_framing", [
    ("pipelined", b"\x07" + http_request("POST", "/predict", body) + http_request("GET", "/healthz") +
     http_request("GET", "/v2/models/ranker_a%2Fx?verbose=1")),
    ("chunked", b"\x03" + b"POST /predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("expect", b"\x01" + http_request("POST", "/predict", b"{}", "Expect: 100-continue\r\n")),
    ("http10", b"\x05GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n"),
])



# gRPC: protobuf by hand (varints and length-delimited fields), so the
# seeds need no generated code.
def varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def field(number, payload):
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    payload = payload if isinstance(payload, bytes) else payload.encode()
    return varint(number << 3 | 2) + varint(len(payload)) + payload


hour = field(1, "hour") + field(2, b"\x09" + struct.pack("<d", 9.0))  # a map entry: FeatureValue{number: 9}
ranking = (field(4, field(1, "u3")) + field(5, hour) + field(6, field(1, "i1")) +
           field(6, field(1, "i42") + field(2, field(1, "tags") + field(2, field(3, field(1, "t1") + field(1, "t2"))))))
raw = [struct.pack("<6f", 40, 9.5, 12, 31, 0, 7)]
tensors = [field(1, "dense") + field(2, "FP32") + field(3, varint(2) + varint(3))]
for stem, indices, offsets in bags:
    for part, values in (("indices", indices), ("offsets", offsets)):
        tensors.append(field(1, f"{stem}_{part}") + field(2, "INT64") + field(3, varint(len(values))))
        raw.append(struct.pack(f"<{len(values)}q", *values))
infer_request = field(1, "m") + b"".join(field(5, t) for t in tensors) + b"".join(field(7, r) for r in raw)
seeds("grpc_messages", [
    ("framed", b"\x00\x00\x00\x00\x00\x05hello"),
    ("timeout", b"\x01" + b"250m"),
    ("status", b"\x02" + "inputs[0]: 100% \u00e9\n".encode()),
    ("ranking", b"\x03" + ranking),
    ("infer", b"\x04" + infer_request),
])

seeds("model_spec", [("tiny_ranker.yaml", (FIXTURES / "features" / "model.yaml").read_bytes())])
seeds("store_line", [("store.jsonl", (FIXTURES / "features" / "store.jsonl").read_bytes())])
# Feast's Redis online format (feast_reply.cpp): one HMGET reply, each field a
# length byte (255: absent) and a serialized feast.types.Value, then the views'
# google.protobuf.Timestamp; hand-encoded from Value.proto's field numbers.
def varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def field(data):
    return bytes([len(data)]) + data


double_12_5 = b"\x29" + struct.pack("<d", 12.5)
string_b7 = b"\x12\x02b7"
tags = b"\x62\x06\x0a\x01a\x0a\x01b"
fresh = b"\x08" + varint(1699999000)
seeds("feast_reply", [
    ("all.bin", field(double_12_5) + field(string_b7) + field(tags) + field(fresh) + field(fresh)),
    ("missing.bin", b"\xff" + field(string_b7) + b"\xff" + field(fresh) + b"\xff"),
    ("int64_id.bin", field(double_12_5) + field(b"\x20" + varint(42)) + field(b"\x72\x02\x01\x02")),
    ("stale.bin", field(double_12_5) + field(string_b7) + field(tags) + field(b"\x08" + varint(1000)) + field(fresh)),
])

# Redis Cluster (cluster_reply.cpp): a CLUSTER SLOTS reply in the target's
# encoding (an op byte per value: 0 string, 1 nil, 2 int32, 3 error, 4 array),
# or a MOVED or ASK error as text.
def r_string(text, op=b"\x00"):
    data = text.encode()
    return op + bytes([len(data)]) + data


def r_int(n):
    return b"\x02" + struct.pack("<i", n)


def r_array(*items):
    return b"\x04" + bytes([len(items)]) + b"".join(items)


def r_node(host, port, *extra):
    return r_array(r_string(host), r_int(port), r_string(f"{port:040x}"), *extra)


def r_range(first, last, *nodes):
    return r_array(r_int(first), r_int(last), *nodes)


seeds("cluster_reply", [
    ("three-masters.bin", r_array(r_range(0, 5460, r_node("10.0.0.1", 7000), r_node("10.0.0.4", 7003)),
                                  r_range(5461, 10922, r_node("10.0.0.2", 7001), r_node("10.0.0.5", 7004)),
                                  r_range(10923, 16383, r_node("10.0.0.3", 7002), r_node("10.0.0.6", 7005)))),
    ("unknown-host.bin", r_array(r_range(0, 16383, r_node("", 7000), r_node("?", 7001)))),
    ("redis7-metadata.bin", r_array(r_range(0, 16383, r_node("10.0.0.1", 7000,
                                                             r_array(r_string("hostname"), r_string("redis-0")))))),
    ("overlapping.bin", r_array(r_range(0, 100, r_node("10.0.0.1", 7000)), r_range(50, 200, r_node("10.0.0.2", 7001)))),
    ("refused.bin", r_string("CLUSTERDOWN The cluster is down", op=b"\x03")),
    ("moved.txt", "MOVED 3999 127.0.0.1:6381"),
    ("ask-no-host.txt", "ASK 1 :7000"),
    ("moved-ipv6.txt", "MOVED 12 ::1:7000"),
])

seeds("service_options", [
    ("demo.yaml", (HERE.parent.parent / "docker" / "demo.yaml").read_bytes()),
    ("many.yaml", "port: 8080\nworkers: 2\nqueue_capacity: 128\nmax_queue_delay: 250ms\nmax_body_bytes: 8Mi\n"
                  "header_timeout: 10s\nidle_timeout: 1m\nbind: numa\nlog_format: json\nmodel_dir: [a, b]\n"),
])

# The agent: the kubelet fixtures, behind the byte that picks the decoder.
kubelet = []
for case in sorted((FIXTURES / "kubelet").iterdir()):
    for selector, name in ((0, "config.yaml"), (1, "cpu_manager_state"), (2, "memory_manager_state")):
        if (case / name).exists():
            kubelet.append((f"{case.name}-{name}", bytes([selector]) + (case / name).read_bytes()))
seeds("kubelet_files", kubelet)
seeds("apiserver_response", [
    ("status.json", '{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "noderesourcetopologies.topology.node.k8s.io is forbidden", "reason": "Forbidden", "code": 403}'),
    ("html.txt", "<html><body>502 Bad Gateway</body></html>"),
])
seeds("agent_options", [("agent.yaml", "interval: 30s\nport: 9300\nhints_dir: /hints\nreserved_cores_per_node: 1\n"
                                       "kube_reserved_memory: 1Gi\npod_memory_fraction: 0.9\noneshot: false\n")])

# Common: what /sys, /proc and hwloc say.
# cluster-plan: besides tests/fixtures/fleet (the unit tests' objects, read
# as seeds too), one more document stream and a malformed object.
seeds("fleet_objects", [
    ("documents.yaml", "kind: Node\nmetadata: {name: a, labels: {numaserve.io/numa-nodes: '2', numaserve.io/smt: 'true'}}\n"
     "---\nkind: NodeResourceTopology\nmetadata: {name: a}\nattributes: [{name: topologyManagerPolicy, value: single-numa-node},"
     " {name: topologyManagerScope, value: pod}]\nzones:\n- name: node-0\n  resources:\n  - {name: cpu, allocatable: 26000m}\n"
     "  - {name: memory, allocatable: 120Gi}\n  - {name: hugepages-1Gi, allocatable: 4Gi}\n- name: node-1\n  resources:\n"
     "  - {name: cpu, allocatable: 26}\n  - {name: memory, allocatable: 128849018880}\n"),
    ("not-a-quantity.yaml", "kind: NodeResourceTopology\nmetadata: {name: n}\nzones:\n- name: node-0\n  resources:\n"
     "  - {name: cpu, allocatable: 14 cores}\n"),
])

# The operator: the chart's ServingPool (as the API server returns it, with
# a uid and a status) and a Lease.
serving_pool = {"apiVersion": "numaserve.io/v1alpha1", "kind": "ServingPool",
                "metadata": {"name": "numaserve", "namespace": "ranking", "uid": "5e2c", "generation": 2},
                "spec": {"sizing": "uniform", "replicasPerNumaNode": 1, "uniformMinUse": 0.85, "headroom": 1,
                         "maxUnavailable": "25%", "nodeSelector": {"pool": "ranking"}, "container": "numaserve",
                         "template": {"metadata": {"labels": {"app.kubernetes.io/name": "numaserve"}},
                                      "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                          "nodeSelectorTerms": [{"matchExpressions": [
                                              {"key": "numaserve.io/replicas", "operator": "Exists"}]}]}}},
                                          "containers": [{"name": "numaserve", "image": "localhost/numaserve:0.1.0",
                                                          "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}},
                "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-02T00:00:00Z"}]}}
seeds("serving_pool", [
    ("pool.json", json.dumps(serving_pool)),
    ("per-class.json", json.dumps({**serving_pool, "spec": {**serving_pool["spec"], "sizing": "per-class", "nodeSelector": {}}})),
    ("lease.json", json.dumps({"kind": "Lease", "metadata": {"name": "numaserve-operator", "resourceVersion": "7"},
                               "spec": {"holderIdentity": "op-a", "leaseDurationSeconds": 15}})),
])

seeds("cpu_set", [(f"s{i}", s) for i, s in enumerate(
    ["0-3,8,10-11", "0", "", "\n", "ff,00000001", "0x3,0xffffffff", "1-0", "0-65535", "00000000,00000000,00000010"])])
seeds("quantity", [(f"q{i}", s) for i, s in enumerate(["8Mi", "1.5G", "100e6", "1Ki", "0", "12345", "2Ei", "1m"])])
# A shipped rowwise table (service/model/kernels/rowwise_file.h): header, then rows of codes, fp16 scale, fp16 bias.
def rowwise(bits, rows, dim, codes, scale=0x2C00, bias=0xB800):
    row = bytes(codes) + struct.pack("<HH", scale, bias)
    return b"NUMAROWS" + struct.pack("<IIQQ", 1, bits, rows, dim) + row * rows


seeds("rowwise_file", [("int8", rowwise(8, 3, 4, [0, 7, 255, 128])), ("int4", rowwise(4, 2, 4, [0x10, 0xF3])),
                       ("nan-scale", rowwise(8, 1, 2, [1, 2], scale=0x7E00)), ("short", b"NUMAROWS\x01\x00")])
seeds("numa_maps", [("linux-6.1", "55d0c5a00000 default file=/usr/bin/numaserve mapped=12 N0=12 kernelpagesize_kB=4\n"
                                  "7f3a40000000 bind:1 anon=16384 dirty=16384 N1=16384 kernelpagesize_kB=4\n"
                                  "7f3b00000000 default file=/dev/hugepages/w huge dirty=2 N0=2 kernelpagesize_kB=2048\n")])
trees = []
for case in sorted((FIXTURES / "cgroup").iterdir()):
    if case.is_dir():
        records = [str(f.relative_to(case)).encode() + b"\x1f" + f.read_bytes()
                   for f in sorted(case.rglob("*")) if f.is_file()]
        trees.append((case.name, b"\x1e".join(records)))
seeds("placement", trees)
# hwloc_xml's seeds are tests/fixtures/topologies/xml itself (scripts/fuzz.sh
# and the replay test read them there), not copies.

# The kubelet's PodResources answers, written in protobuf text format and
# encoded by protoc against the agent's own .proto: a 2-byte length, the
# AllocatableResourcesResponse, then the ListPodResourcesResponse.
import subprocess

PROTO = HERE.parent.parent / "topology-agent" / "podresources"


def encode(message, text):
    return subprocess.run(["protoc", f"--proto_path={PROTO}", f"--encode=v1.{message}", "podresources.proto"],
                          input=text.encode(), capture_output=True, check=True).stdout


def answers(allocatable, pods):
    a = encode("AllocatableResourcesResponse", allocatable)
    return len(a).to_bytes(2, "little") + a + encode("ListPodResourcesResponse", pods)


ALLOCATABLE = ("cpu_ids: [1, 2, 3, 5, 6, 7] "
               "memory { memory_type: 'memory' size: 8589934592 topology { nodes { ID: 0 } } } "
               "memory { memory_type: 'memory' size: 8589934592 topology { nodes { ID: 1 } } } "
               "memory { memory_type: 'hugepages-2Mi' size: 1073741824 topology { nodes { ID: 0 } } }")
GUARANTEED = ("pod_resources { name: 'numaserve-0' namespace: 'ranking' containers { name: 'main' cpu_ids: [2, 6] "
              "memory { memory_type: 'memory' size: 4294967296 topology { nodes { ID: 0 } } } } }")
seeds("podresources", [
    ("empty", answers("", "")),
    ("no-pods", answers(ALLOCATABLE, "")),
    ("guaranteed", answers(ALLOCATABLE, GUARANTEED)),
    ("burstable-and-spread", answers(ALLOCATABLE, GUARANTEED + " pod_resources { name: 'web' namespace: 'w' "
                                     "containers { name: 'c' } containers { name: 'd' memory { memory_type: 'memory' "
                                     "size: 3 topology { nodes { ID: 0 } nodes { ID: 1 } } } "
                                     "devices { resource_name: 'nic' device_ids: ['a', 'b'] } } }")),
    ("stray-ids", answers(ALLOCATABLE, "pod_resources { name: 'x' namespace: 'y' containers { name: 'z' "
                          "cpu_ids: [99, -1] } }")),
])
