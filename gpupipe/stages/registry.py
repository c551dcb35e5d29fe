"""Stage registry: snake_case names used in pipeline files -> stage classes.

Built-in stages register when their modules are imported, which importing any module of
`gpupipe.stages` does (the package imports them all first).
Third-party packages add stages through the ``gpupipe.stages`` entry-point group: each entry
point names a stage class (``my_stage = "my_package.stages:MyStage"``), or a module whose
``@stage`` classes register on import. They load once, the first time the registry is read. A
plugin that fails to load does not stop gpupipe: its error is logged, listed by
``gpupipe stages``, and named in the message when a pipeline asks for a stage it would have
provided.
"""

from __future__ import annotations

import logging

from gpupipe.errors import SpecError, did_you_mean

_REGISTRY: dict[str, type] = {}
#: entry-point group of third-party stages
ENTRY_POINT_GROUP = "gpupipe.stages"
#: "<entry point> (<distribution>)" -> why it failed to load
PLUGIN_ERRORS: dict[str, str] = {}
#: stage name -> "<entry point> (<distribution>)" for stages that came from a plugin
PLUGIN_STAGES: dict[str, str] = {}
_plugins_loaded = False
log = logging.getLogger(__name__)


def register(cls: type) -> type:
    name = cls.stage_name
    if not name or name != name.lower() or not name.replace("_", "").isalnum():
        raise ValueError(f"stage name {name!r} must be snake_case")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"stage name {name!r} is already registered by {_REGISTRY[name]!r}")
    _REGISTRY[name] = cls
    return cls


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    import inspect
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep.dist, "name", None) or "?"
        label = f"{ep.name} = {ep.value} ({dist})"
        before = set(_REGISTRY)
        try:
            obj = ep.load()
            if inspect.isclass(obj):
                # `@stage` registers a stage class as its module is imported
                if _REGISTRY.get(getattr(obj, "stage_name", None)) is not obj:
                    raise TypeError(f"{obj!r} is not a stage class (decorate it with "
                                    f"@gpupipe.stages.stage(name))")
            elif not inspect.ismodule(obj):
                raise TypeError(f"expected a stage class or a module, got {type(obj).__name__}")
        except Exception as e:  # noqa: BLE001 - a broken plugin must not stop gpupipe
            PLUGIN_ERRORS[label] = f"{type(e).__name__}: {e}"
            log.warning("stage plugin %s failed to load: %s: %s", label, type(e).__name__, e)
            continue
        added = set(_REGISTRY) - before
        if inspect.isclass(obj):
            added.add(obj.stage_name)
        for name in added:
            PLUGIN_STAGES.setdefault(name, label)


def get_stage(name: str) -> type:
    """The stage class registered under ``name``; raises `SpecError` with a suggestion."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        broken = "".join(f"\n  plugin {label} failed to load: {err}"
                         for label, err in PLUGIN_ERRORS.items())
        raise SpecError(
            f"unknown stage {name!r}{did_you_mean(name, _REGISTRY)} "
            f"(`gpupipe stages` lists them all){broken}"
        ) from None


def all_stages() -> dict[str, type]:
    _load_plugins()
    return dict(sorted(_REGISTRY.items()))
