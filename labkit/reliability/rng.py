"""Random-number-generator states as plain values a checkpoint can hold.

A resumed run only repeats the interrupted one if every RNG continues where it stopped: torch
(CPU and CUDA), numpy's global RNG, Python's ``random`` and the numpy Generators environments
own (gymnasium's ``env.np_random``). Their native states hold numpy arrays and tuples, which
``torch.load(..., weights_only=True)`` refuses, so these functions turn them into tensors,
ints, floats and strings, and back. Python ints of any size (PCG64's 128-bit state) survive
``torch.save``/``torch.load(weights_only=True)`` as they are.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch

from labkit.errors import ParameterError

_ARRAY_TAG = "__ndarray__"


def _encode(value: Any) -> Any:
    """numpy arrays (at any depth of dicts) as {tag: uint8 tensor of the bytes, dtype, shape}."""
    if isinstance(value, np.ndarray):
        raw = np.ascontiguousarray(value)
        return {
            _ARRAY_TAG: torch.from_numpy(raw.view(np.uint8).reshape(-1).copy()),
            "dtype": raw.dtype.str,
            "shape": list(raw.shape),
        }
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and _ARRAY_TAG in value:
        raw = value[_ARRAY_TAG].numpy().tobytes()
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if isinstance(value, dict):
        return {key: _decode(item) for key, item in value.items()}
    return value


def capture_rng() -> dict[str, Any]:
    """The states of torch (CPU, and every CUDA device when CUDA is available), numpy's global
    RNG and Python's ``random``: what ``restore_rng`` needs to continue the same numbers."""
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": int(version),
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` returned (also after a checkpoint round trip)."""
    missing = {"torch", "numpy", "python"} - set(state)
    if missing:
        raise ParameterError(f"not an RNG state from capture_rng(): missing {sorted(missing)}")
    torch.set_rng_state(state["torch"].to(device="cpu", dtype=torch.uint8))
    cuda = state.get("cuda")
    if cuda:
        if torch.cuda.is_available():
            count = min(len(cuda), torch.cuda.device_count())
            for index in range(count):
                torch.cuda.set_rng_state(cuda[index].to(dtype=torch.uint8), index)
            if count < len(cuda):
                warnings.warn(f"RNG state has {len(cuda)} CUDA generators, this machine "
                              f"{torch.cuda.device_count()}: restored the first {count}",
                              stacklevel=2)
        else:
            warnings.warn("RNG state holds CUDA generators but CUDA is not available here: "
                          "GPU random numbers will differ from the saved run", stacklevel=2)
    npstate = state["numpy"]
    np.random.set_state((
        npstate["name"],
        npstate["key"].numpy().astype(np.uint32),
        int(npstate["pos"]),
        int(npstate["has_gauss"]),
        float(npstate["cached_gaussian"]),
    ))
    pystate = state["python"]
    internal = tuple(int(x) for x in pystate["internal"].tolist())
    random.setstate((int(pystate["version"]), internal, pystate["gauss_next"]))


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's state (any bit generator: PCG64, MT19937, Philox, SFC64...) as
    checkpointable values, e.g. ``generator_state(env.unwrapped.np_random)``."""
    return _encode(generator.bit_generator.state)


def set_generator_state(generator: np.random.Generator, state: dict[str, Any]) -> None:
    """Set ``generator`` in place (objects holding it, like an env, see the change) to a state
    from :func:`generator_state`. The bit generator kinds must match."""
    decoded = _decode(state)
    have = type(generator.bit_generator).__name__
    want = decoded.get("bit_generator") if isinstance(decoded, dict) else None
    if want != have:
        raise ParameterError(f"generator state is for a {want} bit generator, this one is {have}")
    generator.bit_generator.state = decoded


def agent_seed(seed: int, agent: int, width: int) -> int:
    """Distinct, reproducible seeds per agent: agent ``a`` uses ``base .. base + width - 1``."""
    return seed * 1_000_003 + agent * max(1, width) * 101
