"""``jit_compile``: ``distrib.function`` and ``Model.compile(jit_compile=True)`` on ``torch.compile``.

``distrib.function`` is ``tf.function`` for a custom loop's step: the function is called
as it is (Python control flow stays Python), one call is one *execution* of the strategy
(under TPUStrategy the steps it runs are traced and run as one XLA program when it
returns), and with ``jit_compile=True`` it is compiled with ``torch.compile``.

What compiles, and how it meets the replicas' gradient all-reduce:

* The forward computation is captured by TorchDynamo into graphs; AOTAutograd derives
  and compiles the backward of each graph, so forward *and* backward run compiled.
* A module replicated by a strategy keeps DDP's C++ reducer: its gradient hooks fire as
  the compiled backward produces each parameter's gradient, and TorchDynamo's DDP
  optimizer splits the captured forward at DDP's bucket boundaries so that the
  all-reduce of one bucket overlaps the backward of the next.  This works for eager
  and compiled code alike (torch's "python reducer" mode with compiled autograd would
  trace the all-reduce too, but is experimental and stops reducing gradients on any
  backward pass that is not compiled).
* ``loss.backward()``, DDP's hooks and the optimizer's bookkeeping are graph breaks:
  they run eagerly between compiled graphs.
* Compiled graphs are cached: a step compiles on its first call (and once more when a
  batch size changes, after which the batch dimension is dynamic); later steps reuse
  the graphs.  :meth:`Function.experimental_get_tracing_count` counts the graphs.
* Where the compiler fails on a graph, a ``RuntimeWarning`` says which function and
  why, and that graph runs eagerly (before any of it ran, so nothing runs twice).

``jit_compile`` is ``True`` (torch.compile's default backend, inductor) or the name of a
``torch.compile`` backend (``"aot_eager"`` compiles forward and backward graphs without
generating code: fast to compile, for tests).  Strategies that compile every step
themselves (TPUStrategy: XLA) ignore it.

Example::

    @distrib.function(jit_compile=True)
    def train_step(x, y):
        loss = distrib.compute_average_loss(loss_fn(net(x), y), global_batch_size=64)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    for x, y in dist_dataset:
        strategy.run(train_step, args=(x, y))
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from distrib.distribute import context
from distrib.errors import UsageError, explain, warn

__all__ = ["Function", "function", "compile_step"]

#: torch.compile's default backend.
DEFAULT_BACKEND = "inductor"


def _backend_name(jit_compile: Any) -> str | None:
    """The backend ``jit_compile`` asks for (None: do not compile)."""
    if jit_compile is None or jit_compile is False:
        return None
    if jit_compile is True:
        return DEFAULT_BACKEND
    if isinstance(jit_compile, str) and jit_compile:
        import torch._dynamo

        known = torch._dynamo.list_backends(exclude_tags=())
        if jit_compile not in known:  # torch.compile would fail at the first step
            raise UsageError(explain("jit_compile", jit_compile, "is not a torch.compile "
                                     f"backend (the backends are {', '.join(sorted(known))})",
                                     "pass jit_compile=True (inductor) or one of those names"))
        return jit_compile
    raise UsageError(explain("jit_compile", jit_compile, "must be True, False, None or the "
                             "name of a torch.compile backend",
                             "pass jit_compile=True (or e.g. 'aot_eager')"))


class _Compiled:
    """``fn`` under ``torch.compile`` with a backend that counts graphs and falls back.

    Every graph TorchDynamo captures reaches :meth:`_compile`, which hands it to the
    real backend; if that raises, it warns once and returns the graph's eager form.
    """

    def __init__(self, fn: Callable[..., Any], backend: str, name: str,
                 dynamic: bool | None = None) -> None:
        self._name = name
        self._backend_name = backend
        self._backend: Any = None
        self.graphs = 0
        self.failures = 0
        self._compiled = torch.compile(fn, backend=self._compile, dynamic=dynamic)

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        try:
            if self._backend is None:
                self._backend = torch._dynamo.lookup_backend(self._backend_name)
            return self._backend(gm, example_inputs)
        except torch._dynamo.exc.TorchDynamoException:
            raise  # TorchDynamo's own signals (restart the analysis, skip the frame)
        except Exception as e:  # the compiler's failure, before the graph ever ran
            self.failures += 1
            if self.failures == 1:
                reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
                warn(
                    f"jit_compile: torch.compile (backend {self._backend_name!r}) could not "
                    f"compile a graph of {self._name} ({type(e).__name__}: {reason[:300]}); "
                    "that part runs eagerly, with the same results. Fix: check the "
                    "compiler's message above, or pass jit_compile=False to run eagerly "
                    "without this warning.", RuntimeWarning)
            return gm.forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)


def compile_step(fn: Callable[..., Any], jit_compile: Any, name: str,
                 strategy: Any = None) -> _Compiled | None:
    """``fn`` compiled as ``jit_compile`` says, or None when it should run as it is.

    None also when ``strategy`` compiles every step itself (TPUStrategy).

    Example:
        >>> compile_step(lambda x: x + 1, False, "f") is None
        True
    """
    backend = _backend_name(jit_compile)
    if backend is None:
        return None
    if strategy is not None and strategy.extended.compiles_steps:
        return None
    return _Compiled(fn, backend, name)


class Function:
    """A function run as one execution of the current strategy, compiled on request.

    Made by :func:`function`.  Calling it calls the Python function (compiled with
    ``torch.compile`` when ``jit_compile`` asks) inside ``strategy.extended.execution()``
    of the strategy current at the call.

    Example:
        >>> f = function(lambda x: x * 2)
        >>> f(torch.tensor(3))
        tensor(6)
    """

    def __init__(self, python_function: Callable[..., Any], jit_compile: Any = None,
                 reduce_retracing: bool = False, name: str | None = None) -> None:
        if not callable(python_function):
            raise UsageError(explain("function", python_function, "must be callable",
                                     "decorate a function: @distrib.function"))
        self._fn = python_function
        self._backend = _backend_name(jit_compile)
        self._jit_compile = jit_compile
        self._dynamic = True if reduce_retracing else None
        self._name: str = name or str(getattr(python_function, "__qualname__",
                                              repr(python_function)))
        self._compiled: _Compiled | None = None
        functools.update_wrapper(self, python_function)

    @property
    def python_function(self) -> Callable[..., Any]:
        """The wrapped Python function."""
        return self._fn

    def _target(self, strategy: Any) -> Callable[..., Any]:
        if self._backend is None or strategy.extended.compiles_steps:
            return self._fn
        if self._compiled is None:
            self._compiled = _Compiled(self._fn, self._backend, self._name, self._dynamic)
        return self._compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        strategy = context.get_strategy()
        with strategy.extended.execution():
            return self._target(strategy)(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def experimental_get_tracing_count(self) -> int:
        """Graphs compiled so far (0 when not compiled): flat once every shape was seen.

        Example:
            >>> function(lambda x: x).experimental_get_tracing_count()
            0
        """
        return self._compiled.graphs if self._compiled is not None else 0

    def __repr__(self) -> str:
        return f"<distrib.function {self._name} jit_compile={self._jit_compile!r}>"


def function(func: Callable[..., Any] | None = None, input_signature: Any = None,
             autograph: bool = True, jit_compile: bool | str | None = None,
             reduce_retracing: bool = False, **kwargs: Any) -> Any:
    """``tf.function`` for PyTorch: a custom-loop step as one execution, optionally compiled.

    Args:
        func: the function (``@distrib.function``), or None to configure
            (``@distrib.function(jit_compile=True)``).
        input_signature, autograph: accepted for TensorFlow compatibility; the function
            runs as Python, and ``torch.compile`` guards on the shapes it sees.
        jit_compile: ``True`` or a ``torch.compile`` backend name compiles it (see the
            module docstring); None or False runs it as it is.
        reduce_retracing: compile with dynamic shapes from the start, so that batches of
            other sizes reuse the graphs.

    Example::

        @distrib.function(jit_compile=True)
        def step(x, y): ...
    """
    unknown = set(kwargs) - {"experimental_implements", "experimental_autograph_options",
                             "experimental_attributes", "experimental_relax_shapes",
                             "experimental_follow_type_hints", "experimental_compile"}
    if unknown:
        raise UsageError(explain("function() arguments", sorted(unknown),
                                 "are not arguments of tf.function", "remove them"))
    if kwargs.get("experimental_compile") is not None and jit_compile is None:
        jit_compile = kwargs["experimental_compile"]
    if kwargs.get("experimental_relax_shapes"):
        reduce_retracing = True

    def wrap(fn: Callable[..., Any]) -> Function:
        return Function(fn, jit_compile=jit_compile, reduce_retracing=reduce_retracing)

    return wrap if func is None else wrap(func)
