"""The single-process executor of a run generated in rounds (a race, ``--until``): one
:func:`~engine.generation.run.drive` per round, the models kept loaded between rounds while they fit
(:class:`KeptBackends`). The generation layer's; the commands that race and stop use it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import torch

from engine.generation.run import free_memory, open_task_backend, task_chunks, token_keys
from engine.generation.types import ExecChunk, ModelTask, RunSpec


def _free_bytes(device) -> int:
    """Memory the device has free now (CUDA: the driver's count; CPU: the kernel's MemAvailable)."""
    dev = torch.device(device or "cpu")
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kib * 1024
    except (OSError, StopIteration, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _weight_bytes(b) -> int:
    """The bytes of a transformers backend's weights (0 when it has none to count, e.g. vLLM)."""
    model = getattr(getattr(b, "lm", None), "model", None)
    if model is None:
        return 0
    return sum(t.numel() * t.element_size() for t in model.parameters())


class KeptBackends:
    """The single-process executor of a run generated in rounds (a race, ``--until``): each round as
    :func:`local_executor` generates it, but a transformers model stays loaded between rounds while
    the device still has room for one more model of its size; otherwise it is freed after its round, as
    before. Why: each round is a new :func:`drive`, and the plain executor loaded every model again
    every round (a race of three 135M models, five rounds: 15 loads instead of 3). vLLM engines are
    never kept (an engine reserves most of a GPU). Models that leave the race (absent from a round's
    tasks) are freed at that round's start; :meth:`close` (or the ``with`` block's end) frees the rest.

    Keys: (name, device, backend, tensor_parallel, dtype). ``headroom``: the free memory a kept model
    must leave, in multiples of its own weights.
    """

    def __init__(self, headroom: float = 1.0):
        self.headroom = headroom
        self._kept: dict[tuple, tuple] = {}  # key -> (backend, token keys)
        self.loads = 0  # backends opened (what the tests count)

    def __call__(self, tasks: Sequence[ModelTask], spec: RunSpec) -> Iterator[ExecChunk]:
        tasks = list(tasks)
        key_of = {
            t.name: (t.name, spec.device, spec.backend, spec.tensor_parallel, spec.dtype, spec.key_mode)
            for t in tasks
        }
        for key in [k for k in self._kept if k not in key_of.values()]:  # out of the race: freed
            self._free(key)
        for t in tasks:
            key = key_of[t.name]
            b, keys = self._kept.pop(key, (None, None))
            if b is None:
                b = open_task_backend(t, spec)
                self.loads += 1
                keys = token_keys(b, spec.key_mode)
            yield from task_chunks(b, t, spec, keys)
            size = _weight_bytes(b)
            # the device the model is on (spec.device None = chosen when it loaded: CUDA when there is one)
            where = getattr(b, "device", None) or spec.device
            if spec.backend == "hf" and size and _free_bytes(where) >= self.headroom * size:
                self._kept[key] = (b, keys)
            else:
                b.close()
                del b, keys
                free_memory()

    def _free(self, key) -> None:
        b, _ = self._kept.pop(key)
        b.close()
        del b
        free_memory()

    def close(self) -> None:
        for key in list(self._kept):
            self._free(key)

    def __enter__(self) -> KeptBackends:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
