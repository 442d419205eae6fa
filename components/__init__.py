"""Pulumi components for GPU clusters on AWS: network, storage, EKS, GPU node pools, add-ons.

Each component takes a ``<Name>Args`` dataclass, validates it in its constructor (every problem
at once, as a ConfigError) and creates its children with ``parent=self``.
"""
