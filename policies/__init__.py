"""The gpuinfra policy pack: rules in ``gpuinfra.review.policy``, the pulumi-policy wiring in ``pack``."""
