"""The tensors the warmup steps use: part of the start set, found without a heap walk.

A graph can grow on a tensor made before the check with no new Python object
(``total += loss`` on a fixture's tensor, ``avg.add_(loss)``), so the torch probe must
know such tensors from the start. The ones that matter are the ones the step uses: a
``TorchFunctionMode`` pushed for the warmup steps only sees every tensor passed to a
torch function, method or property there and remembers it by weak reference. At the
end of warmup the still-alive ones join the probe's baseline (``TorchProbe.adopt``).

What it cannot see (said in the result when the recording alone made the start set):
operations outside torch's function dispatch (code ``torch.compile`` compiled, C++
extensions that take tensors directly, other threads: the mode stack is per thread),
and tensors a step uses only after warmup. While dynamo traces a function the mode does
nothing, so compiled graphs do not contain it.

The mode is the top of torch's function-mode stack only while nothing else is pushed
above it; ``stop`` takes it off wherever it is and puts back what lay above it, so the
stack is always left as the step left it, minus this mode.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from pytest_graphleak.heap.op_warnings import catch_op_warnings, release_op_warnings


class WarmupTensors:
    """Records, by weak reference, the tensors that torch operations use while started.

    ``start()`` -> the warmup steps -> ``stop()`` (returns the tensors still alive, as a
    list the caller owns and should clear). Never keeps a tensor alive; ``stop`` is safe
    to call more than once and after a failed ``start``.
    """

    #: What it records and what it cannot see (the note when it alone made the start set).
    records = "the tensors that torch operations used"
    misses = (
        "code outside torch's function dispatch (compiled graphs, C++ extensions, other threads)"
    )

    def __init__(self) -> None:
        # id -> weak reference; a dead reference is replaced when its id comes back.
        self._seen: dict[int, weakref.ref[Any]] = {}
        self._mode: Any = None

    def start(self) -> None:
        """Push the recording mode (torch must already be imported)."""
        if self._mode is not None:
            raise RuntimeError("WarmupTensors.start() called twice")
        mode = _mode_class()(self.remember)
        mode.__enter__()
        self._mode = mode

    def stop(self) -> list[Any]:
        """Pop the mode; the recorded tensors still alive (strong references: clear the
        list when done)."""
        mode, self._mode = self._mode, None
        if mode is not None:
            _remove_mode(mode)
        seen, self._seen = self._seen, {}
        try:
            alive = [ref() for ref in seen.values()]
            return [tensor for tensor in alive if tensor is not None]
        finally:
            seen.clear()

    def paused(self) -> Any:
        """A context in which the mode records nothing: the check's own torch calls (a
        sample reads every tensor's storage) are not the step's, and through the mode
        each costs a Python call."""
        return sys.modules["torch"]._C.DisableTorchFunction()

    def remember(self, tensor: Any) -> None:
        key = id(tensor)
        ref = self._seen.get(key)
        if ref is None or ref() is not tensor:
            # A tensor type without weak references cannot be held safely: left out.
            with contextlib.suppress(TypeError):
                self._seen[key] = weakref.ref(tensor)


def _remove_mode(mode: Any) -> None:
    """Take ``mode`` off torch's function-mode stack, keeping the modes above it."""
    torch_c: Any = sys.modules["torch"]._C
    above: list[Any] = []
    try:
        while torch_c._len_torch_function_stack() > 0:
            top = torch_c._pop_torch_function_stack()
            if top is mode:
                return
            above.append(top)
    finally:
        for other in reversed(above):
            torch_c._push_on_torch_function_stack(other)


@cache
def _mode_class() -> type:
    """The mode's class, made once per process (classes live in reference cycles)."""
    torch: Any = sys.modules["torch"]
    tensor_type = torch.Tensor
    is_compiling = torch.compiler.is_compiling
    sequences = (list, tuple)
    if TYPE_CHECKING:  # typed as torch's own class; torch is not imported here at run time
        from torch.overrides import TorchFunctionMode
    else:
        TorchFunctionMode = torch.overrides.TorchFunctionMode

    class RecordTensors(TorchFunctionMode):
        def __init__(self, remember: Callable[[Any], None]) -> None:
            super().__init__()
            self.remember = remember
            # type -> is it a Tensor: a lookup is faster than isinstance via torch's metaclass
            self.kinds: dict[type, bool] = {}

        def note(self, value: Any) -> None:
            kind = type(value)
            flag = self.kinds.get(kind)
            if flag is None:
                flag = self.kinds[kind] = issubclass(kind, tensor_type)
            if flag:
                self.remember(value)
            elif kind in sequences:  # torch.cat([a, b]), torch.stack((a, b))
                for item in value:
                    if isinstance(item, tensor_type):
                        self.remember(item)

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            __tracebackhide__ = True  # pytest shows the user's line that called torch
            kwargs = kwargs or {}
            if is_compiling():  # while dynamo traces, stay out of the compiled graph
                return func(*args, **kwargs)
            for value in args:
                self.note(value)
            for value in kwargs.values():
                self.note(value)
            caught = catch_op_warnings()
            try:
                result = func(*args, **kwargs)
            except BaseException:
                release_op_warnings(caught, raising=True)
                raise
            release_op_warnings(caught, raising=False)
            return result

    return RecordTensors
