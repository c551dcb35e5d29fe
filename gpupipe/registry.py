"""Stage registry: snake_case names used in pipeline files -> stage classes."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from gpupipe.errors import SpecError

if TYPE_CHECKING:
    from gpupipe.stages.base import Stage

_REGISTRY: dict[str, type[Stage]] = {}


def register(cls: type[Stage]) -> type[Stage]:
    name = cls.stage_name
    if not name or name != name.lower() or not name.replace("_", "").isalnum():
        raise ValueError(f"stage name {name!r} must be snake_case")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"stage name {name!r} is already registered by {_REGISTRY[name]!r}")
    _REGISTRY[name] = cls
    return cls


def _ensure_builtins() -> None:
    import gpupipe.stages  # noqa: F401  (registers the built-in stages)


def closest(name: str, candidates) -> str | None:
    """The candidate most similar to ``name``, if any is close enough to be a likely typo."""
    found = difflib.get_close_matches(str(name), list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, candidates) -> str:
    guess = closest(name, candidates)
    return f" — did you mean {guess!r}?" if guess else ""


def get_stage(name: str) -> type[Stage]:
    """The stage class registered under ``name``; raises `SpecError` with a suggestion."""
    _ensure_builtins()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise SpecError(
            f"unknown stage {name!r}{did_you_mean(name, _REGISTRY)} "
            f"(`gpupipe stages` lists them all)"
        ) from None


def all_stages() -> dict[str, type[Stage]]:
    _ensure_builtins()
    return dict(sorted(_REGISTRY.items()))
