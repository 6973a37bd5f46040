"""numaserve reads what Feast itself writes.

A Feast repository (the real `feast` SDK and CLI) whose feature views hold
the demo store's features, `feast apply` and `feast materialize` into a real
redis-server; then numaserve serving from that Redis must answer every
request with the scores it gives from the embedded store (the same values in
store.jsonl). The repository uses names other than numaserve's defaults (its
own project, views and join keys, one feature in a view of its own under
another name) so model.yaml's feature_store mapping is exercised, and some
users lack a feature (a null in Feast) so defaults are too.

The same again into a real Redis Cluster (3 masters, a replica each): Feast's
redis_type redis_cluster writes through redis-py's RedisCluster, each entity's
hash on its key's slot, and numaserve reads it from redis+cluster:// startup
nodes; the keys must be spread over every master.
"""
import datetime
import json
import os
import pathlib
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import cluster_nodes, store_lines

FEAST = pathlib.Path(sys.executable).with_name("feast")
PROJECT = "ranking"

REPO = '''
from datetime import timedelta
from feast import Entity, FeatureView, Field, FileSource, ValueType
from feast.types import Array, Float64, Int64, String

user = Entity(name="user", join_keys=["user_key"], value_type=ValueType.STRING)
item = Entity(name="item", join_keys=["item_key"], value_type=ValueType.STRING)

def source(name):
    return FileSource(name=name, path="{data}/" + name + ".parquet", timestamp_field="event_timestamp")

user_profile = FeatureView(name="user_profile", entities=[user], ttl=timedelta(days=30), online=True,
    source=source("users"), schema=[Field(name="age", dtype=Int64), Field(name="activity", dtype=Int64),
    Field(name="country", dtype=String), Field(name="segment", dtype=String),
    Field(name="recent_items", dtype=Array(String))])
item_catalog = FeatureView(name="item_catalog", entities=[item], ttl=timedelta(days=30), online=True,
    source=source("items"), schema=[Field(name="ctr", dtype=Float64), Field(name="age_days", dtype=Int64),
    Field(name="category", dtype=String), Field(name="brand", dtype=String), Field(name="tags", dtype=Array(String))])
item_prices = FeatureView(name="item_prices", entities=[item], ttl=timedelta(days=30), online=True,
    source=source("prices"), schema=[Field(name="price_usd", dtype=Float64)])
'''


def feature_repo(tmp_path, online_store, users, items):
    repo, data = tmp_path / "feature_repo", tmp_path / "data"
    repo.mkdir()
    data.mkdir()
    (repo / "feature_store.yaml").write_text(yaml.safe_dump({
        "project": PROJECT, "provider": "local", "registry": str(data / "registry.db"),
        "online_store": online_store,
        "offline_store": {"type": "file"}, "entity_key_serialization_version": 3}))
    (repo / "features.py").write_text(REPO.format(data=data))
    when = pd.Timestamp.now(tz="UTC").floor("s") - pd.Timedelta(hours=1)

    def frame(rows, key, columns, dtypes):
        df = pd.DataFrame([{key: r["id"], **{c: r["features"].get(c) for c in columns}} for r in rows])
        df["event_timestamp"] = when
        return df.astype(dtypes)

    frame(users, "user_key", ["age", "activity", "country", "segment", "recent_items"],
          {"age": "Int64", "activity": "Int64"}).to_parquet(data / "users.parquet")
    frame(items, "item_key", ["ctr", "age_days", "category", "brand", "tags"],
          {"age_days": "Int64"}).to_parquet(data / "items.parquet")
    prices = pd.DataFrame({"item_key": [r["id"] for r in items], "price_usd": [r["features"]["price"] for r in items]})
    prices["event_timestamp"] = when
    prices.to_parquet(data / "prices.parquet")
    return repo, when


def feast(repo, *args):
    result = subprocess.run([str(FEAST), "--chdir", str(repo), *args], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, FEAST_USAGE="False"))
    assert result.returncode == 0, f"feast {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def mapped_model(demo, tmp_path):
    """ranker_a with a feature_store section naming the Feast repository's objects."""
    out = tmp_path / "ranker_a"
    out.mkdir()
    (out / "model.pt").symlink_to(demo / "ranker_a" / "model.pt")
    spec = yaml.safe_load((demo / "ranker_a" / "model.yaml").read_text())
    spec["feature_store"] = {
        "project": PROJECT,
        "user": {"view": "user_profile", "join_key": "user_key", "join_key_type": "string"},
        "item": {"view": "item_catalog", "join_key": "item_key", "join_key_type": "string"},
    }
    for f in spec["features"]:
        if f["name"] == "price":
            f.update(view="item_prices", store_name="price_usd")
    (out / "model.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def requests(users, items):
    bodies = []
    for k in range(40):
        user = users[(k * 7) % len(users)]["id"]
        chosen = [items[(k * 13 + j * 5) % len(items)]["id"] for j in range(1 + k % 9)]
        bodies.append({"model": "ranker_a", "user": {"id": user}, "context": {"hour": k % 24},
                       "items": [{"id": i} for i in chosen]})
    bodies.append({"model": "ranker_a", "user": {"id": "nobody"}, "items": [{"id": "nothing"}, {"id": items[0]["id"]}]})
    bodies.append({"model": "ranker_a", "user": {"id": users[1]["id"], "features": {"age": 80}},
                   "items": [{"id": items[2]["id"], "features": {"price": 1.5}}]})
    return bodies


def demo_rows(demo, tmp_path):
    """The demo store's users and items, some users without an age, and them as store.jsonl."""
    lines = store_lines(demo / "store.jsonl")
    users = [line for line in lines if line["kind"] == "user"]
    items = [line for line in lines if line["kind"] == "item"]
    for k, user in enumerate(users):
        if k % 7 == 3:
            del user["features"]["age"]  # a null in Feast, absent in store.jsonl: the default either way
    store = tmp_path / "store.jsonl"
    store.write_text("".join(json.dumps(line) + "\n" for line in users + items))
    return users, items, store


def serves_what_feast_materialized(demo, tmp_path, serve, online_store, feature_store):
    """Feast applies and materializes the demo rows into online_store (feature_store.yaml's
    section); numaserve serving from feature_store (its URL for that store) must answer
    every request as it does from the embedded store, and never fall back to defaults.
    Returns the users and items Feast wrote."""
    users, items, store = demo_rows(demo, tmp_path)
    repo, when = feature_repo(tmp_path, online_store, users, items)
    feast(repo, "apply")
    start = (when - datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    end = (when + datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S")
    feast(repo, "materialize", start, end)

    model = mapped_model(demo, tmp_path)
    from_feast = serve([model], feature_store=feature_store, args=["--feature-query-timeout", "1s"])
    embedded = serve([model], feature_store=store)
    for body in requests(users, items):
        a, b = from_feast.predict(body), embedded.predict(body)
        assert len(a["scores"]) == len(body["items"])
        assert a["scores"] == pytest.approx(b["scores"], rel=1e-6, abs=1e-7), body
    metrics = from_feast.request("GET", "/metrics")[1]
    degraded = [line for line in metrics.splitlines() if line.startswith("numaserve_feature_store_degraded_total")]
    assert degraded and all(line.endswith(" 0") for line in degraded), degraded
    return users, items


def test_numaserve_serves_what_feast_materialized(demo, tmp_path, redis_port, serve):
    serves_what_feast_materialized(demo, tmp_path, serve,
                                   {"type": "redis", "connection_string": f"127.0.0.1:{redis_port}"},
                                   f"redis://127.0.0.1:{redis_port}")


def test_numaserve_serves_what_feast_materialized_into_a_redis_cluster(demo, tmp_path, redis_cluster, serve):
    nodes = ",".join(f"127.0.0.1:{port}" for port in redis_cluster[:2])  # startup nodes, Feast's format and ours
    users, items = serves_what_feast_materialized(
        demo, tmp_path, serve, {"type": "redis", "redis_type": "redis_cluster", "connection_string": nodes},
        f"redis+cluster://{nodes}")
    masters = cluster_nodes.master_ports(redis_cluster)
    assert len(masters) == 3, masters
    sizes = {port: int(cluster_nodes.cli(port, "DBSIZE")) for port in masters}
    assert all(n > 0 for n in sizes.values()), sizes  # every master holds some of Feast's keys
    # one hash per entity (item_catalog and item_prices share an item's key), nothing else
    assert sum(sizes.values()) == len(users) + len(items), sizes
