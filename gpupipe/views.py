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

from dask.utils import Dispatch

html = Dispatch("html")
report = Dispatch("report")
