"""How gpupipe's objects show themselves to people, without the lower floors importing the code
that draws them (the ui floor): each view is dispatched on the object's type, and its
implementations are registered lazily by the package face the first time an object of gpupipe
is dispatched (as `gpupipe.backends` registers cuDF).

* `html(obj) -> str`: the notebook view of a stage, a pipeline, a run result or its report
  (`gpupipe.notebook`); they define ``_repr_html_`` as ``views.html(self)``;
* `report(result) -> str`: writes ``report.html`` into a finished run's directory
  (`gpupipe.report`) and returns its path; the runner calls it when a run completes.
"""

from __future__ import annotations

import functools


class Dispatch:
    """`functools.singledispatch` on the first argument's type, whose implementations a package
    registers the first time one of its objects is dispatched (`register_lazy`), as
    `dask.utils.Dispatch` does: importing gpupipe then imports neither dask nor the views."""

    def __init__(self, name: str):
        self.__name__ = name
        self._lazy: dict[str, object] = {}

        @functools.singledispatch
        def missing(obj, *args, **kwargs):
            raise TypeError(f"no {name} view for {type(obj).__module__}.{type(obj).__name__}")

        self._impl = missing

    def register(self, cls, func=None):
        return self._impl.register(cls) if func is None else self._impl.register(cls, func)

    def register_lazy(self, toplevel: str, func=None):
        """Call ``func`` (once) before dispatching an object whose type, or a base of it, is
        defined in the package ``toplevel``."""
        def wrapper(f):
            self._lazy[toplevel] = f
            return f

        return wrapper if func is None else wrapper(func)

    def __call__(self, obj, *args, **kwargs):
        if self._lazy:
            for cls in type(obj).__mro__:
                register = self._lazy.pop(cls.__module__.partition(".")[0], None)
                if register is not None:
                    register()
        return self._impl(obj, *args, **kwargs)


html = Dispatch("html")
report = Dispatch("report")
