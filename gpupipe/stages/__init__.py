"""Built-in stages. Importing this package registers them.

>>> from gpupipe.stages import LengthFilter
>>> LengthFilter(min_words=20).describe()
'length_filter(min_words=20)'
"""

from gpupipe.stages.base import Filter, GlobalStage, RowStage, Stage, StageResult, Transform, stage
from gpupipe.stages.dedup.exact import ExactDedup
from gpupipe.stages.dedup.fuzzy import FuzzyDedup
from gpupipe.stages.dedup.semantic import SemanticDedup
from gpupipe.stages.dedup.span import SpanDedup
from gpupipe.stages.dedup.url import UrlDedup
from gpupipe.stages.filters.decontaminate import Decontaminate
from gpupipe.stages.filters.language import LanguageId
from gpupipe.stages.filters.length_filter import LengthFilter
from gpupipe.stages.filters.quality import (
    C4Quality,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
)
from gpupipe.stages.filters.simple import RegexFilter, Sample, SymbolRatioFilter, WordCountFilter
from gpupipe.stages.filters.url import UrlFilter
from gpupipe.stages.layout.repartition import Repartition
from gpupipe.stages.models.classify import Classify
from gpupipe.stages.models.embed import Embed
from gpupipe.stages.transforms.extract_html import ExtractHtml
from gpupipe.stages.transforms.normalize_text import NormalizeText
from gpupipe.stages.transforms.pii import PiiRedact
from gpupipe.stages.transforms.tokenize import Tokenize

__all__ = [
    "Classify",
    "Embed",
    "SemanticDedup",
    "SpanDedup",
    "LanguageId",
    "PiiRedact",
    "RegexFilter",
    "Sample",
    "SymbolRatioFilter",
    "WordCountFilter",
    "C4Quality",
    "Decontaminate",
    "ExactDedup",
    "UrlDedup",
    "UrlFilter",
    "ExtractHtml",
    "FuzzyDedup",
    "Filter",
    "FineWebQuality",
    "GlobalStage",
    "GopherQuality",
    "GopherRepetition",
    "LengthFilter",
    "NormalizeText",
    "Repartition",
    "RowStage",
    "Stage",
    "StageResult",
    "Tokenize",
    "Transform",
    "stage",
]
