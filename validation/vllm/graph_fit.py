#!/usr/bin/env python3
"""Fit a CUDA-graph constant to public vLLM logs (for a per-layer-graph model of vLLM's CUDA-graph
estimate; the model itself, serve_graphs.rs of an earlier session's commit 02d528b, did not land).

Each entry of graph_memory.jsonl is one start-up log: the graphs vLLM captured (piecewise sizes,
full decode sizes, layers) and the memory it estimated ("Estimated CUDA graph memory") or, where
no estimate is logged, the capture it measured ("Graph capturing finished ..., took X GiB").
A layer-graph is one piece of one layer at one size: piecewise × (layers + 1) + full × layers.

kappa = median over the `dev` entries of GiB / layer-graphs (and over `dev-nccl` for graphs that
capture NCCL's all-reduce). The `heldout` entries are predicted with those constants and their
errors printed; nothing is fitted to them. Run: python3 validation/vllm/graph_fit.py
"""
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
GIB = 1 << 30


def layer_graphs(e):
    return e["piecewise_sizes"] * (e["layers"] + 1) + e["full_sizes"] * e["layers"]


def logged(e):
    return e["estimated_gib"] if e["estimated_gib"] is not None else e["actual_gib"]


def main():
    entries = [json.loads(l) for l in open(os.path.join(HERE, "graph_memory.jsonl"))]
    kappa = {}
    for group in ("dev", "dev-nccl"):
        per = [logged(e) * GIB / layer_graphs(e) / MIB for e in entries if e["set"] == group]
        kappa[group] = statistics.median(per)
        print(f"{group}: kappa = {kappa[group]:.4f} MiB per layer-graph over {len(per)} logs "
              f"({', '.join(f'{x:.3f}' for x in per)}) -> {round(kappa[group] * 1024)} KiB")
    errors, flat = [], []
    for e in entries:
        k = kappa["dev-nccl"] if e["nccl_in_graphs"] else kappa["dev"]
        pred = k * layer_graphs(e) * MIB / GIB
        err = pred / logged(e) - 1
        if e["set"] == "heldout":
            errors.append(abs(err))
            flat.append(abs(0.71 / logged(e) - 1))
        what = "estimate" if e["estimated_gib"] is not None else "actual"
        print(f"  {e['set']:8} {e['id']:40} {pred:5.2f} vs {logged(e):5.2f} GiB ({what}) {err:+.0%}")
    print(f"heldout: median |error| {statistics.median(errors):.0%}, max {max(errors):.0%} over {len(errors)} logs "
          f"(vram's earlier flat 0.71 GiB: median {statistics.median(flat):.0%}, max {max(flat):.0%})")


if __name__ == "__main__":
    main()
