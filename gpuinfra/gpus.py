"""What a driver build can run: the GPUs each branch supports, and what NGC images need of it.

Two tables, each with its source, read by the integrity check's driver rule:

- the first data center driver branch that supports each GPU model gpuinfra names (the
  instance catalog's ``gpu_name`` and the GPU types sites use);
- for NVIDIA's NGC images (Triton's ``YY.MM-py3`` tags), the CUDA release each is built on,
  the driver that CUDA release needs, and the older branches that run it on data center GPUs
  through the forward-compatibility package the image carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuinfra.versions import parse

# The first data center driver branch whose supported-products list names the GPU.
# Source: NVIDIA Data Center GPU Driver release notes, "Hardware and Software Support" of each
# branch (R450 introduced Ampere's A100, R470 lists the A10/A10G; R525 the first production
# branch with Hopper's H100 and Ada's L4; R535 L40S; R550 H200).
GPU_MIN_BRANCH: dict[str, int] = {
    "a100": 450,
    "a10": 470,
    "a10g": 470,
    "a30": 470,
    "a40": 470,
    "h100": 525,
    "l4": 525,
    "l40": 525,
    "l40s": 535,
    "h200": 550,
}
GPU_TABLE_SOURCE = "NVIDIA Data Center GPU Driver release notes, supported products per branch"


@dataclass(frozen=True)
class ImageDriver:
    """What one range of NGC image releases needs of the host driver."""

    cuda: str
    # The driver the image's CUDA release needs (CUDA_MIN_DRIVER of its major.0: minor-version
    # compatibility lets any driver of the major's first release run every later minor).
    native: str
    # The oldest build of each older branch that runs the image on a data center GPU.
    forward_compatible: tuple[str, ...]


# NGC releases from 25.08 on are built on CUDA 13 (25.08: 13.0.0, 25.10: 13.0.2; 26.05 NGC
# framework images: 13.2.1). CUDA 13.0 needs 580.65.06 (versions.CUDA_MIN_DRIVER). The branches
# listed for data center GPUs are those both the Triton 25.08/25.10 and the NGC 26.05 notes name.
# Source: the Triton Inference Server release notes of 25.08 and 25.10, and NGC framework release
# notes of 26.05, "Driver Requirements". Older releases are not in the table.
NGC_IMAGE_DRIVERS: tuple[tuple[str, ImageDriver], ...] = (
    ("25.08", ImageDriver("13", "580.65.06", ("470.57", "525.85", "535.86"))),
)
IMAGE_TABLE_SOURCE = "Triton Inference Server and NGC framework release notes, Driver Requirements"
_NGC_TAG = re.compile(r"^(\d{2}\.\d{2})-")


def image_driver(tag: str) -> ImageDriver | None:
    """What an NGC image tag (``26.07-py3``) needs of the driver; None for a tag the table does not
    reach (older than its oldest row, or not an NGC release tag)."""
    found = _NGC_TAG.match(tag)
    if not found:
        return None
    release = parse(found.group(1))
    for since, needs in NGC_IMAGE_DRIVERS:
        if release >= parse(since):
            return needs
    return None


def runs_image(driver: str, gpu: str, needs: ImageDriver) -> bool:
    """Whether a host at ``driver`` with a ``gpu`` runs an image that ``needs`` this."""
    have = parse(driver)
    if have >= parse(needs.native):
        return True
    if gpu not in GPU_MIN_BRANCH:  # forward compatibility is for data center GPUs only
        return False
    return any(
        have[:1] == parse(oldest)[:1] and have >= parse(oldest)
        for oldest in needs.forward_compatible
    )


# --- MIG ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile: its share of the GPU and how many of it one GPU holds."""

    compute: int  # compute slices (the N of Ng)
    memory: int  # memory slices
    most: int  # instances of this profile one GPU holds


@dataclass(frozen=True)
class MigGpu:
    """One MIG-capable GPU model with a given memory size, and the profiles it offers."""

    memory_gib: int
    compute: int
    memory: int
    profiles: dict[str, MigProfile]


def _seven_slices(memory_gib: int, sizes: tuple[int, int, int, int]) -> MigGpu:
    """The profiles of a GPU with 7 compute and 8 memory slices, named by the GB of 1, 2, 4 and 8
    memory slices (A100 and Hopper: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)."""
    one, two, four, eight = sizes
    return MigGpu(
        memory_gib,
        compute=7,
        memory=8,
        profiles={
            f"1g.{one}gb": MigProfile(1, 1, 7),
            f"1g.{one}gb+me": MigProfile(1, 1, 1),
            f"1g.{two}gb": MigProfile(1, 2, 4),
            f"2g.{two}gb": MigProfile(2, 2, 3),
            f"3g.{four}gb": MigProfile(3, 4, 2),
            f"4g.{four}gb": MigProfile(4, 4, 1),
            f"7g.{eight}gb": MigProfile(7, 8, 1),
        },
    )


# The GPU instance profiles of each MIG-capable model gpuinfra names, per memory size. Source:
# NVIDIA's Multi-Instance GPU User Guide, "Supported MIG Profiles"; the H200's row is what
# `nvidia-smi mig -lgip` prints on one (tests/fixtures/nvidia-h200/mig-lgip.txt). The other
# models of GPU_MIN_BRANCH (A10, A10G, A40, L4, L40, L40S) have no MIG.
MIG_GPUS: dict[str, tuple[MigGpu, ...]] = {
    "a100": (_seven_slices(40, (5, 10, 20, 40)), _seven_slices(80, (10, 20, 40, 80))),
    "a30": (
        MigGpu(
            24,
            compute=4,
            memory=4,
            profiles={
                "1g.6gb": MigProfile(1, 1, 4),
                "1g.6gb+me": MigProfile(1, 1, 1),
                "2g.12gb": MigProfile(2, 2, 2),
                "2g.12gb+me": MigProfile(2, 2, 1),
                "4g.24gb": MigProfile(4, 4, 1),
            },
        ),
    ),
    "h100": (_seven_slices(80, (10, 20, 40, 80)), _seven_slices(94, (12, 24, 47, 94))),
    "h200": (_seven_slices(141, (18, 35, 71, 141)),),
}
MIG_TABLE_SOURCE = "NVIDIA Multi-Instance GPU User Guide, Supported MIG Profiles"


def _layout_problem(name: str, layout: dict[str, int], gpu: MigGpu, model: str) -> str:
    shown = f"{model.upper()} ({gpu.memory_gib} GB)"
    for profile, count in layout.items():
        if profile not in gpu.profiles:
            return (
                f"the MIG layout {name} has {profile}, which the {shown} does not offer "
                f"(allowed: {', '.join(gpu.profiles)}; {MIG_TABLE_SOURCE})"
            )
        if count > gpu.profiles[profile].most:
            return (
                f"the MIG layout {name} has {count} of {profile}, and one {shown} holds at most "
                f"{gpu.profiles[profile].most}"
            )
    compute = sum(gpu.profiles[p].compute * n for p, n in layout.items())
    memory = sum(gpu.profiles[p].memory * n for p, n in layout.items())
    if compute > gpu.compute or memory > gpu.memory:
        return (
            f"the MIG layout {name} takes {compute} compute and {memory} memory slices of each "
            f"{shown}, which has {gpu.compute} and {gpu.memory}"
        )
    return ""


def mig_layout_problem(
    model: str, memory_gib: int | None, name: str, layout: dict[str, int]
) -> str:
    """Why the GPUs of ``model`` cannot be split by the MIG layout ``name`` (profile -> count on
    each GPU); '' where they can, or where the model is not in the tables. ``memory_gib`` picks
    the model's size (None: any size of it will do)."""
    if model in GPU_MIN_BRANCH and model not in MIG_GPUS:
        return (
            f"its {model.upper()} GPUs have no MIG, so the MIG manager cannot apply the layout "
            f"{name} and leaves them whole (MIG: {', '.join(m.upper() for m in MIG_GPUS)})"
        )
    sizes = [g for g in MIG_GPUS.get(model, ()) if memory_gib in (None, g.memory_gib)]
    if not sizes:
        return ""
    problems = [_layout_problem(name, layout, gpu, model) for gpu in sizes]
    if "" in problems:
        return ""
    # Of the sizes that fit none, the one that knows the most of the layout's profiles.
    known = [sum(p in gpu.profiles for p in layout) for gpu in sizes]
    return problems[known.index(max(known))]
