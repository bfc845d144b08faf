#!/usr/bin/env python3
"""Reference peaks for the committed snapshots, computed the way PyTorch's memory_viz does.

Mirrors `process_alloc_data` and `annotate_snapshot` in torch/utils/viz/MemoryViz.js (the code
behind torch.cuda._memory_viz.trace_plot and pytorch.org/memory_viz): an allocation lives from its
`alloc` to its `free_completed` (or legacy `free`); a free with no alloc in the trace was live
before the trace began; an `active_allocated` block of the final segments not allocated in the
trace was live throughout; the peak is the largest total after any action. With plot_segments the
same walk runs over segment_alloc / segment_free and the segments' total_size.

Loads with a restricted Unpickler that refuses every class, so no code can run.
Usage: python3 memory_viz_peaks.py *.pickle > expected_peaks.json
"""
import json
import pickle
import sys


class _NoClasses(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load: pickle imports {module}.{name}")


def process_alloc_data(snapshot, device, plot_segments):
    elements, initially, actions, addr_to_alloc = [], [], [], {}
    alloc = "segment_alloc" if plot_segments else "alloc"
    frees = ("segment_free",) if plot_segments else ("free", "free_completed")
    for e in snapshot["device_traces"][device]:
        if e["action"] == alloc:
            elements.append(e["size"])
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in frees:
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e["size"])
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in snapshot["segments"]:
        if seg["device"] != device:
            continue
        if plot_segments:
            if seg["address"] not in addr_to_alloc:
                elements.append(seg["total_size"])
                initially.append(len(elements) - 1)
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in addr_to_alloc:
                elements.append(b.get("requested_size", b["size"]))
                initially.append(len(elements) - 1)
            addr += b["size"]
    initially.reverse()
    if not actions and initially:
        actions.append(initially.pop())
    live, total, peak = set(), 0, 0
    for i in initially:
        live.add(i)
        total += elements[i]
    for i in actions:
        if i in live:
            live.remove(i)
            total -= elements[i]
        else:
            live.add(i)
            total += elements[i]
        peak = max(peak, total)
    return peak


def main():
    out = {}
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            snap = _NoClasses(f).load()
        devices = [i for i, t in enumerate(snap["device_traces"]) if t]
        out[path.split("/")[-1]] = {
            str(d): {
                "peak_allocated_bytes": process_alloc_data(snap, d, False),
                "peak_reserved_bytes": process_alloc_data(snap, d, True),
            }
            for d in devices
        }
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
