"""The anchors' forward: a TorchScript model.pt run by a PyTorch build in
this process, one thread, on the tensors `numaserve extract` printed (one
JSON object per line on --inputs), timed like `numaserve-bench forward`.

    python forward.py --model-dir DIR --inputs FILE [--seconds S] [--mode as-loaded|frozen|ipex]

as-loaded: torch.jit.load as written. frozen: torch.jit.freeze and
torch.jit.optimize_for_inference, PyTorch's own graph passes. ipex: Intel's
extension imported (it registers its TorchScript fusion passes) and then
frozen, as its documentation does for TorchScript models. Prints one JSON
object: items/s, p50, the versions, and the scores of the first input (so
the caller can check every anchor ran the same model on the same rows).
"""
import argparse
import json
import platform
import statistics
import time

import torch


def tensors(line):
    batch = json.loads(line)
    dense = torch.tensor(batch["dense"], dtype=torch.float32).reshape(batch["rows"], batch["dense_width"])
    indices = [torch.tensor(b["indices"], dtype=torch.int64) for b in batch["bags"]]
    offsets = [torch.tensor(b["offsets"], dtype=torch.int64) for b in batch["bags"]]
    return batch["rows"], (dense, indices, offsets)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--mode", choices=["as-loaded", "frozen", "ipex"], default="as-loaded")
    args = parser.parse_args()

    torch.set_num_threads(1)
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    if args.mode == "ipex":
        import intel_extension_for_pytorch as ipex  # noqa: F401 (its import registers the JIT passes)

        versions["intel_extension_for_pytorch"] = ipex.__version__
    model = torch.jit.load(f"{args.model_dir}/model.pt").eval()
    if args.mode in ("frozen", "ipex"):
        model = torch.jit.freeze(model)
    if args.mode == "frozen":
        model = torch.jit.optimize_for_inference(model)
    with open(args.inputs) as f:
        batches = [tensors(line) for line in f if line.strip()]
    rows = batches[0][0]
    latencies = []
    with torch.inference_mode():
        first = model(*batches[0][1]).flatten().tolist()
        start = time.perf_counter()
        measure_from = start + args.warmup
        end = measure_from + args.seconds
        i = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                break
            model(*batches[i % len(batches)][1])
            t1 = time.perf_counter()
            if t0 >= measure_from:
                latencies.append(t1 - t0)
            i += 1
    print(json.dumps({"what": "anchor forward", "mode": args.mode, "versions": versions, "rows": rows,
                      "calls": len(latencies), "items_per_s": len(latencies) * rows / args.seconds,
                      "p50_ms": statistics.median(latencies) * 1e3, "first_scores": first}))


if __name__ == "__main__":
    main()
