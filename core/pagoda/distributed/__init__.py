"""Tensor parallelism: the rank's view of its group (:mod:`.parallel`) and how groups start (:mod:`.launch`)."""

from pagoda.interfaces.parallel import SINGLE, TensorParallel

__all__ = ["SINGLE", "TensorParallel"]
