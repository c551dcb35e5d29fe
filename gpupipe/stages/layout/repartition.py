"""repartition: change the number or size of partitions (a global stage)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ByteSize, Field

from gpupipe.stages.base import GlobalStage, stage


@stage("repartition")
class Repartition(GlobalStage):
    """Merge or split partitions to ``npartitions`` or to about ``partition_size`` bytes each.

    Many small input files make many tiny tasks; one huge file makes one huge task. Row order is
    kept, and the result depends only on the data, never on the number of workers.
    """

    npartitions: Annotated[int | None, Field(ge=1)] = None
    partition_size: ByteSize | None = None

    def __post_init__(self):
        if (self.npartitions is None) == (self.partition_size is None):
            raise ValueError("give exactly one of npartitions or partition_size (e.g. '128MB')")

    def apply(self, ddf, ctx=None):
        if self.npartitions is not None:
            return ddf.repartition(npartitions=self.npartitions)
        return ddf.repartition(partition_size=int(self.partition_size))
