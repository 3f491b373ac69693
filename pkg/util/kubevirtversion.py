"""KubeVirt releases as the launcher formulas tell them apart: "0.54" .. "1.9", a patch, or "main".

The overhead formula (overhead.py) and the launcher renderer (launcher/) change with KubeVirt's
version, sometimes in patch releases; this is where a version string becomes a comparable value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class KubeVirtVersion:
    """A KubeVirt release (major.minor.patch), or the development branch after v1.9.0 ("main")."""

    major: int
    minor: int
    patch: int
    is_main: bool = False

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        """Whether this release contains a change first shipped in major.minor.patch.

        "main" contains every change known here (it is newer than every tag this module knows).
        """
        if self.is_main:
            return True
        return (self.major, self.minor, self.patch) >= (major, minor, patch)

    def between(self, first: tuple[int, int, int], before: tuple[int, int, int]) -> bool:
        """first <= self < before: for changes that existed only in a range of releases."""
        return self.at_least(*first) and not self.at_least(*before)

    def __str__(self) -> str:
        return "main" if self.is_main else f"v{self.major}.{self.minor}.{self.patch}"


MAIN: Final = KubeVirtVersion(1, 10, 0, is_main=True)
"""KubeVirt's main branch after v1.9.0, the future v1.10: like v1.9 but QEMU's share grew from 30Mi
to 50Mi (c822873795, not in any v1.9 release)."""

_OLDEST_MINOR: Final = (0, 54)  # Harvester v1.2.1 ships KubeVirt v0.54, the oldest we port
_NEWEST_MINOR: Final = (1, 9)
NEWEST_KUBEVIRT_VERSION: Final = "1.9"
"""The newest release whose launcher formula is ported: the fallback for a version we do not know."""
# "v1.6.3", "1.6", "0.54.0-150400.3.19.1" (a distribution's build suffix is ignored).
_VERSION_RE: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+][0-9A-Za-z.+_-]*)?")


def parse_kubevirt_version(version: str | KubeVirtVersion) -> KubeVirtVersion:
    """ "0.54" .. "1.9" with an optional "v" and patch ("v1.6.3", "1.8.3"), or "main".

    A version without a patch means its ".0" release, as in semantic versioning ("1.5" is v1.5.0,
    which still adds the dedicated-CPU reservation after the ratio; v1.5.3 moved it before). A
    suffix after the patch ("-rc.1", a distribution's "-150400.3.19.1") is ignored. Anything
    else, or a minor release outside v0.54..v1.9, raises ValueError.
    """
    if isinstance(version, KubeVirtVersion):
        return version
    if not isinstance(version, str):
        raise ValueError(f"KubeVirt version must be a string, not {type(version).__name__}")
    text = version.strip()
    if text == "main":
        return MAIN
    match = _VERSION_RE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"unknown KubeVirt version {version!r}: expected e.g. '1.6', 'v1.6.3' or 'main'"
        )
    major, minor = int(match.group(1)), int(match.group(2))
    patch = int(match.group(3)) if match.group(3) is not None else 0
    if not _OLDEST_MINOR <= (major, minor) <= _NEWEST_MINOR:
        raise ValueError(
            f"unknown KubeVirt version {version!r}: supported are v0.54 to v1.9 and 'main'"
        )
    return KubeVirtVersion(major, minor, patch)


def is_newer_than_known(version: str) -> bool:
    """Whether `version` reads as a release after the newest minor this module knows ("v1.10.0",
    "v1.10.0-alpha.0-12-gabcdef", "v2.0.0"): a release cut from main after v1.9.0, so it holds at
    least what MAIN stands for. False for anything else (older, unreadable, "devel")."""
    match = _VERSION_RE.fullmatch(version.strip())
    if match is None:
        return False
    return (int(match.group(1)), int(match.group(2))) > _NEWEST_MINOR
