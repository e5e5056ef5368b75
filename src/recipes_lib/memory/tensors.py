"""Counting tensor memory on any device: storages, their bytes, and `TensorMemoryTracker`, which
watches every tensor PyTorch creates during one batch and says what held the memory."""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from recipes_lib.modeling.optimizers import optimizer_state_tensors, tensors_in, unwrap_optimizer

# The CUDA caching allocator hands out blocks in multiples of 512 bytes; counting tensors the same
# way makes the tracker's figures comparable with torch.cuda.max_memory_allocated.
CUDA_BLOCK_BYTES = 512
# How many allocations a storage may wait before it changes kind and still change it everywhere
# (see TensorMemoryTracker._open_window). A weight's gradient reaches its parameter within 2-3.
PENDING_WINDOWS = 16


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage | None:
    # Sparse, nested and meta tensors have no plain storage to count.
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return None
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def weight_tensors(model: torch.nn.Module):
    """Parameters, buffers and, for quantized bitsandbytes weights, their quantization constants: a 4-bit
    weight's quant_state; an 8-bit LLM.int8 weight's per-row scales (SCB), which its layer's matmul
    state holds, with the int8 weights, after the first forward (storages already counted count once)."""
    for parameter in model.parameters():
        yield parameter
        quant_state = getattr(parameter, "quant_state", None)
        if quant_state is not None:
            yield from tensors_in(quant_state)
        scales = getattr(parameter, "SCB", None)
        if isinstance(scales, torch.Tensor):
            yield scales
    for module in model.modules():
        state = getattr(module, "state", None)
        if type(state).__name__ == "MatmulLtState":
            yield from (t for t in (state.CB, state.SCB) if isinstance(t, torch.Tensor))
    yield from model.buffers()


def gradient_tensors(model: torch.nn.Module):
    return (p.grad for p in model.parameters() if p.grad is not None)


def storage_bytes(tensors, device_type: str | None = None) -> int:
    """Bytes of the distinct storages behind `tensors` (a view or a shared tensor counts once)."""
    seen, total = set(), 0
    for tensor in tensors:
        storage = _storage(tensor)
        if storage is None or storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += _block_bytes(storage.nbytes(), device_type or tensor.device.type)
    return total


def _block_bytes(nbytes: int, device_type: str) -> int:
    if device_type == "cuda":
        return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return nbytes


# --- the tracker -----------------------------------------------------------------------------------


class TensorMemoryTracker(TorchDispatchMode):
    """Live bytes of every tensor storage, by what it holds, and the peak of each kind and of all; inside
    `optimizer.step()` new storages are "optimizer" (new state and temporaries). docs/memory.md ("How, on
    CPU") says how storages are sorted, and why not PyTorch's own MemTracker.
    """

    KINDS = ("weights", "gradients", "optimizer", "activations", "other")

    def __init__(self, model: torch.nn.Module, optimizer=None, inputs: Any = None):
        super().__init__()
        self.model = model
        self.optimizer = unwrap_optimizer(optimizer)
        self.inputs = inputs
        self.live = dict.fromkeys(self.KINDS, 0)
        self.peak = dict.fromkeys(self.KINDS, 0)
        self.live_total = 0
        self.peak_total = 0
        self.optimizer_state_bytes = 0
        # id(storage) -> [kind, bytes, weak reference, window it was created in]; the weak
        # reference's callback subtracts the bytes when the storage is freed.
        self._records: dict[int, list] = {}
        self._in_optimizer_step = 0
        self._hooks: list = []
        self._window_id = 0
        self._windows = deque([(0, dict.fromkeys(self.KINDS, 0))])

    # Bookkeeping -------------------------------------------------------------------------------
    # Autograd creates a parameter's gradient as the output of a backward op and hands it to the
    # parameter (where the hook moves it to "gradients") a few ops later; counting the peaks at
    # once would count, say, the word-embedding gradient as an activation for that instant. So the
    # peak of each kind is committed late: every new storage opens a window holding the highest
    # live figures seen in it; the last PENDING_WINDOWS windows stay open, and a storage that
    # changes kind changes kind in every open window since it was created.
    def _account(self, kind: str, change: int) -> None:
        self.live[kind] += change
        self.live_total += change
        if change > 0:
            window = self._windows[-1][1]
            window[kind] = max(window[kind], self.live[kind])
            self.peak_total = max(self.peak_total, self.live_total)

    def _open_window(self) -> None:
        self._window_id += 1
        self._windows.append((self._window_id, dict(self.live)))
        if len(self._windows) > PENDING_WINDOWS:
            self._commit(self._windows.popleft()[1])

    def _commit(self, window: dict[str, int]) -> None:
        for kind in self.KINDS:
            self.peak[kind] = max(self.peak[kind], window[kind])

    def _forget(self, key: int, _reference) -> None:
        record = self._records.pop(key, None)
        if record is not None:
            self._account(record[0], -record[1])

    def _track(self, tensor: torch.Tensor, kind: str, move: bool = False) -> None:
        storage = _storage(tensor)
        if storage is None:
            return
        key = id(storage)
        record = self._records.get(key)
        nbytes = _block_bytes(storage.nbytes(), tensor.device.type)
        if record is None:
            reference = weakref.ref(storage, lambda ref, key=key: self._forget(key, ref))
            self._records[key] = [kind, nbytes, reference, self._window_id]
            self._account(kind, nbytes)
            return
        if record[1] != nbytes:  # an op resized its output's storage
            self._account(record[0], nbytes - record[1])
            record[1] = nbytes
        if move and record[0] != kind:
            old_kind, created = record[0], record[3]
            self.live[old_kind] -= nbytes
            self.live[kind] += nbytes
            for window_id, window in self._windows:
                if window_id >= created:  # it was alive, under the old kind, through this window
                    window[old_kind] -= nbytes
                    window[kind] += nbytes
            record[0] = kind

    # Hooks ---------------------------------------------------------------------------------------
    def _gradient_stored(self, parameter: torch.Tensor) -> None:
        if parameter.grad is not None:
            self._track(parameter.grad, "gradients", move=True)

    def _optimizer_step_begins(self, optimizer, args, kwargs) -> None:
        self._in_optimizer_step += 1

    def _optimizer_step_ends(self, optimizer, args, kwargs) -> None:
        self._in_optimizer_step -= 1
        for tensor in optimizer_state_tensors(optimizer):
            self._track(tensor, "optimizer", move=True)
        self.optimizer_state_bytes = max(
            self.optimizer_state_bytes, storage_bytes(optimizer_state_tensors(optimizer))
        )

    def __enter__(self):
        for tensor in weight_tensors(self.model):
            self._track(tensor, "weights")
        for tensor in gradient_tensors(self.model):
            self._track(tensor, "gradients")
        for tensor in optimizer_state_tensors(self.optimizer):
            self._track(tensor, "optimizer")
        self.optimizer_state_bytes = storage_bytes(optimizer_state_tensors(self.optimizer))
        for tensor in tensors_in(self.inputs):
            self._track(tensor, "other")
        self._hooks = [
            parameter.register_post_accumulate_grad_hook(self._gradient_stored)
            for parameter in self.model.parameters()
            if parameter.requires_grad
        ]
        self._hooks += [
            register_optimizer_step_pre_hook(self._optimizer_step_begins),
            register_optimizer_step_post_hook(self._optimizer_step_ends),
        ]
        return super().__enter__()

    def __exit__(self, *exc_info):
        result = super().__exit__(*exc_info)
        while self._windows:
            self._commit(self._windows.popleft()[1])
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._records.clear()  # drops the weak references, so no callback fires after this
        return result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(getattr(subclass, "__name__", "") == "DTensor" for subclass in types):
            # FSDP2's sharded tensors: let DTensor turn the op into ops on its local shards first;
            # those come back here with plain tensors (as PyTorch's MemTracker does).
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        kind = "optimizer" if self._in_optimizer_step else "activations"
        tensors = [tensor for tensor in tree_leaves(out) if isinstance(tensor, torch.Tensor)]
        storages = [_storage(tensor) for tensor in tensors]
        # A new window opens only when new memory arrives (views and in-place ops bring none).
        if any(storage is not None and id(storage) not in self._records for storage in storages):
            self._open_window()
        for tensor in tensors:
            self._track(tensor, kind)
        return out

    # Results -------------------------------------------------------------------------------------
    def breakdown_bytes(self) -> dict[str, int]:
        """Peak bytes of each kind; optimizer temporaries move from "optimizer" to "other"."""
        optimizer_temporaries = max(0, self.peak["optimizer"] - self.optimizer_state_bytes)
        return {
            "weights": self.peak["weights"],
            "gradients": self.peak["gradients"],
            "optimizer_state": self.optimizer_state_bytes,
            "activations": self.peak["activations"],
            "other": self.peak["other"] + optimizer_temporaries,
        }
