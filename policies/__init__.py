"""The gpuinfra policy pack: rules in ``validators``, the pulumi-policy wiring in ``__main__``."""
