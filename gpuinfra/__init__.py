"""gpuinfra: infrastructure as code for GPU clusters, with one set of pinned versions."""

__version__ = "0.1.0"
