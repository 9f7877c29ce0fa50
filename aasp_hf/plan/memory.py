"""Peak memory of a step: `LiveTensorBytes` (live bytes of the tensors operators create, on real or fake tensors) and
`profiler_peak_bytes` (the CPU allocator's peak from the profiler's memory events, for real steps)."""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary


class LiveTensorBytes(TorchDispatchMode):
    """Live bytes of the tensors that operators create while the mode is on, and their peak.

    Every operator's output storage is counted once (views share their base's storage) when it is created and
    uncounted when it is freed (a weak reference to the storage; PyTorch keeps one Python object per storage, so
    its finaliser runs exactly when the storage is released). Storages that existed before (`ignore`: parameters,
    buffers, optimiser state) are not counted. Works on real and on fake tensors (a fake tensor's storage has the
    size the real one would have). Gradients are operator outputs, so they count from the moment autograd makes them.
    """

    def __init__(self, ignore=()):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._known = WeakIdKeyDictionary()  # storage -> True, by identity
        for tensor in ignore:
            self._known[tensor.untyped_storage()] = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                if storage in self._known:
                    continue
                nbytes = storage.nbytes()
                self._known[storage] = True
                self.current += nbytes
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._free, nbytes)
        return out

    def _free(self, nbytes):
        self.current -= nbytes


def profiler_peak_bytes(function) -> int:
    """Peak of the bytes that PyTorch's CPU allocator holds for tensors while `function` runs, from the profiler's
    memory events (every allocation and free the c10 CPU allocator reports, with its size; what existed before is
    not counted). This is the CPU counterpart of `torch.cuda.max_memory_allocated` growth, and it sees what the
    dispatch-level tracker of the plan cannot: allocations made inside kernels, workspaces, autograd's own buffers."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        function()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak
