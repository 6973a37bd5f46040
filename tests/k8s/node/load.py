#!/usr/bin/env python3
"""/predict load through a Service's pods, as a Service's proxy sends it.

No kube-proxy runs in the node test's VM, so this client does its job: it
reads the Service's EndpointSlices from the API server (admin credentials of
a kubeconfig) every INTERVAL seconds and sends each request to the next
ready endpoint, over a new connection, 20 a second at most. It runs until
the file STOP exists, then prints one JSON line: requests sent, failures
(each with its endpoint and error) and the endpoints it saw.

Usage: load.py KUBECONFIG NAMESPACE SERVICE PORT STOP
"""
import http.client
import json
import os
import ssl
import sys
import time
import urllib.request

import yaml

INTERVAL = 0.5
# A request at most every PACE seconds: sent flat out, this client took most
# of the emulated machine (under TCG one host thread runs every vCPU) that
# the rollout's new pods start on.
PACE = 0.05


def api_client(kubeconfig):
    """GET of the API server as the kubeconfig's user."""
    config = yaml.safe_load(open(kubeconfig))
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    host, port = cluster["server"].split("//", 1)[1].rsplit(":", 1)
    # The API server's certificate names localhost (tls-server-name), not
    # the address the VM reaches it at.
    server_name = cluster.get("tls-server-name", host)

    class Connection(http.client.HTTPSConnection):
        def connect(self):
            http.client.HTTPConnection.connect(self)
            self.sock = context.wrap_socket(self.sock, server_hostname=server_name)

    # One connection kept open: a TLS handshake at every refresh took most
    # of the emulated CPU this client had. Opened again after an error.
    connection = None

    def get(path):
        nonlocal connection
        if connection is None:
            connection = Connection(host, int(port), timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
        except Exception:
            connection.close()
            connection = None
            raise
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        return json.loads(body)

    return get


def ready_endpoints(get, namespace, service):
    slices = get(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                 f"?labelSelector=kubernetes.io/service-name%3D{service}")
    return sorted(address for s in slices["items"] for e in s.get("endpoints") or []
                  if (e.get("conditions") or {}).get("ready") for address in e["addresses"])


def main():
    kubeconfig, namespace, service, port, stop = sys.argv[1:]
    get = api_client(kubeconfig)
    body = json.dumps({"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}).encode()
    sent, failures, seen, endpoints, refreshed, turn = 0, [], set(), [], 0.0, 0
    while not os.path.exists(stop):
        if time.monotonic() - refreshed > INTERVAL:
            try:
                endpoints = ready_endpoints(get, namespace, service)
            except Exception as e:  # the API server slow under load: keep the last list
                print(f"load.py: endpoints: {e}", file=sys.stderr)
            refreshed = time.monotonic()
            seen.update(endpoints)
        if not endpoints:
            time.sleep(0.1)
            continue
        endpoint = endpoints[turn % len(endpoints)]
        turn += 1
        sent += 1
        try:
            request = urllib.request.Request(f"http://{endpoint}:{port}/predict", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                if len(json.load(response)["scores"]) != 2:
                    failures.append([endpoint, "scores"])
        except Exception as e:
            failures.append([endpoint, str(e)])
        time.sleep(PACE)
    print(json.dumps({"sent": sent, "failures": failures, "endpoints": sorted(seen)}))


if __name__ == "__main__":
    main()
