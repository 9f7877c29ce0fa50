"""`HostSyncCounter`: the tests' CPU stand-in for `torch.cuda.set_sync_debug_mode("error")`, which counts the
operators that would make the host wait for the device inside a training step."""

import torch


class HostSyncCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operators that make the host wait for a value computed on the device: `aten._local_scalar_dense`
    (`.item()`, `bool(t)`, `float(t)`, `int(t)`), `aten.is_nonzero` and the data-dependent-shape ops `nonzero`,
    `masked_select`, `unique` — the CPU counterpart of `torch.cuda.set_sync_debug_mode("error")`, which exists only
    on CUDA. `names` lists what was seen."""

    SYNCING = ("_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "unique", "_unique2")

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.SYNCING:
            self.names.append(name)
        return func(*args, **(kwargs or {}))
