"""The pulumi-policy pack: ``pulumi preview --policy-pack policies``. Rules: ``gpuinfra.review.policy``."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, PolicyPack

from policies.pack import policies

# Serves the policies to the engine until it is done with them.
PolicyPack(name="gpuinfra", enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
