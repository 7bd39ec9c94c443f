"""Persistent, tiered KV cache: warm blocks in host RAM, cold ones on disk per workspace, and
sparse residency of latent blocks for long contexts.

Modules: `paths` (where a workspace's store lives), `blockfile` (the block file format, atomic
writes), `disk` (`DiskStore`: the cold tier), `host` (`HostTier`: the warm tier), `tiers`
(`CacheTiers`: the block manager's cold store, tying them to the device pool), `residency`
(`SpilledLatents`: attention over latents spilled to the host).

Invariant: importing this package, `paths`, `blockfile`, `disk` or `host` does not import torch
(a crash-test writer and tools run without it); `tiers` and `residency` do.
"""
