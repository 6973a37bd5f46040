#!/usr/bin/env python3
"""bench/reload.sh's reload trigger: flips ranker_a's version policy between
versions 1 and 2 and asks the admin port to load, PAUSE seconds apart, until
the file STOP exists; prints {"reloads", "failed_reloads"}. One process for
the whole measurement (a shell loop forking curl per call put its own CPU
time on the server's or the load generator's CPUs): reload.sh runs it on the
load generator's CPUs at nice 19, as a model puller would run outside the
replica's CPUs."""
import json
import os
import sys
import time
import urllib.error
import urllib.request

admin, config, stop, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
with open(config) as f:
    version = 2 if "[1]" in f.read() else 1
ok = failed = 0
url = f"http://127.0.0.1:{admin}/v2/repository/models/ranker_a/load"
while not os.path.exists(stop):
    time.sleep(pause)
    with open(config, "w") as f:
        f.write(f"version_policy: {{specific: [{version}]}}\n")
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=120).read()
        ok += 1
    except (urllib.error.URLError, OSError):
        failed += 1
    version = 3 - version
print(json.dumps({"reloads": ok, "failed_reloads": failed}))
