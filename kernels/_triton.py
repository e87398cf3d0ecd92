"""Lazy Triton import and backend resolution shared by every kernel module.

``import tractable.kernels`` never imports Triton.  A kernel module asks for its Triton kernels
through :func:`build`, which imports Triton on first use and builds the ``@triton.jit`` functions
once per interpreter mode (``TRITON_INTERPRET`` is read when a kernel is decorated, so kernels
built before and after the variable is set are cached apart).

Backends, for a public op called with ``backend=``:

* ``"torch"``: the pure-torch reference path (any device);
* ``"triton"``: the Triton kernels.  On CUDA tensors they are compiled; on CPU tensors they run
  only under ``TRITON_INTERPRET=1`` (the Triton interpreter, slow, used by the tests);
  otherwise :class:`KernelBackendError` is raised;
* ``"auto"``: ``"triton"`` when the tensors are on a CUDA device and Triton imports, else
  ``"torch"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ..fsa.errors import TractableError

__all__ = [
    "KernelBackendError",
    "BACKENDS",
    "triton_available",
    "interpret_mode",
    "resolve_backend",
    "build",
    "import_triton",
]

BACKENDS = ("auto", "triton", "torch")

_TRITON: Any = None
_TRITON_ERROR: BaseException | None = None
_KERNELS: dict[tuple[str, bool], Any] = {}


class KernelBackendError(TractableError, RuntimeError):
    """The requested kernel backend cannot run here (no Triton, or CPU tensors without
    ``TRITON_INTERPRET=1``), or ``backend=`` is not one of ``"auto"``, ``"triton"``,
    ``"torch"``."""


def interpret_mode() -> bool:
    """Whether ``TRITON_INTERPRET`` is set to a true value (Triton's own parsing)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def import_triton():
    """``(triton, triton.language)``; raises :class:`KernelBackendError` if Triton is missing."""
    global _TRITON, _TRITON_ERROR
    if _TRITON is None and _TRITON_ERROR is None:
        try:
            import triton
            import triton.language as tl

            _TRITON = (triton, tl)
        except Exception as e:  # noqa: BLE001 - ImportError, or a broken install raising others
            _TRITON_ERROR = e
    if _TRITON is None:
        raise KernelBackendError(
            f"backend='triton' needs the triton package, which failed to import: {_TRITON_ERROR}"
        )
    return _TRITON


def triton_available() -> bool:
    """Whether Triton imports (without raising)."""
    try:
        import_triton()
    except KernelBackendError:
        return False
    return True


def resolve_backend(backend: str, *tensors: torch.Tensor | None, op: str = "kernel") -> str:
    """``"triton"`` or ``"torch"`` for the tensors of one call (see the module docstring).

    Raises:
        KernelBackendError: unknown ``backend``; ``"triton"`` without Triton; ``"triton"`` on
            CPU tensors without ``TRITON_INTERPRET=1``; tensors on different devices.
    """
    if backend not in BACKENDS:
        raise KernelBackendError(f"{op}: backend must be one of {BACKENDS}, got {backend!r}")
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise KernelBackendError(
            f"{op}: tensors are on different devices {sorted(map(str, devices))}"
        )
    on_cuda = bool(devices) and next(iter(devices)).type == "cuda"
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if on_cuda and triton_available() else "torch"
    import_triton()
    if not on_cuda and not interpret_mode():
        where = next(iter(devices)).type if devices else "no"
        raise KernelBackendError(
            f"{op}: backend='triton' on {where} tensors needs TRITON_INTERPRET=1 (the Triton "
            "interpreter); use CUDA tensors, backend='torch', or backend='auto'"
        )
    return "triton"


def build(name: str, factory: Callable[[Any, Any], Any]) -> Any:
    """Kernels of one module, built once per interpreter mode: ``factory(triton, tl)``."""
    key = (name, interpret_mode())
    k = _KERNELS.get(key)
    if k is None:
        triton, tl = import_triton()
        k = factory(triton, tl)
        _KERNELS[key] = k
    return k
