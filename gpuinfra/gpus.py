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
