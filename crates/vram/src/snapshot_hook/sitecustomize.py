# Installed only on the PYTHONPATH of a child started by `vram run --snapshot`; nothing global.
# Records PyTorch's CUDA allocator history (torch.cuda.memory._record_memory_history, PyTorch
# >= 2.1) and dumps the snapshot to $VRAM_SNAPSHOT_OUT at exit and when an OutOfMemoryError is
# raised, so `vram explain` can say what was live. Never fails the child: every step is guarded.
import os
import sys

_OUT = os.environ.get("VRAM_SNAPSHOT_OUT")
_MAX_ENTRIES = int(os.environ.get("VRAM_SNAPSHOT_MAX_ENTRIES", "100000"))


def _chain_user_sitecustomize():
    # This file shadows any sitecustomize later on sys.path: load that one too.
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util

    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_vram_user_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _dump(reason):
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.memory._dump_snapshot(_OUT)
            sys.stderr.write(f"vram: memory snapshot ({reason}) written to {_OUT}\n")
    except Exception as e:  # never break the child
        sys.stderr.write(f"vram: could not write the memory snapshot: {e}\n")


class _TorchWatcher:
    """Meta-path finder: when `torch` is imported, start recording right after it loads.

    The real finders locate torch; only its loader's exec_module is wrapped (the usual
    post-import hook pattern), so torch is imported once, by the child, when the child wants it.
    """

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            _start(module)

        spec.loader.exec_module = exec_module
        return spec


def _start(torch):
    try:
        torch.cuda.memory._record_memory_history(max_entries=_MAX_ENTRIES)
        _install_oom_hook(torch)
    except Exception as e:
        sys.stderr.write(f"vram: memory history not recorded: {e}\n")


def _install_oom_hook(torch):
    previous = sys.excepthook

    def hook(kind, value, tb):
        if isinstance(value, getattr(torch.cuda, "OutOfMemoryError", ())):
            _dump("out of memory")
        previous(kind, value, tb)

    sys.excepthook = hook


if _OUT:
    import atexit

    try:
        _chain_user_sitecustomize()
    except Exception as e:
        sys.stderr.write(f"vram: the existing sitecustomize failed: {e}\n")
    sys.meta_path.insert(0, _TorchWatcher())
    atexit.register(_dump, "exit")
