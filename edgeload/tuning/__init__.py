"""The deploy-time sweep behind ``edgeload autotune``: trials on real workloads, the winning profile."""

from .tune import DatasetWorkload, TuneResult, VideoWorkload, autotune

__all__ = ["DatasetWorkload", "TuneResult", "VideoWorkload", "autotune"]
