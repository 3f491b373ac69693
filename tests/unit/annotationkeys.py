"""The API server's check of an annotation key (ValidateAnnotations), to prove the keys the
product writes are accepted."""

from __future__ import annotations

import re
from typing import Final

from harvester_quota.util.annotations import is_valid_qualified_name_part

_DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253
_DNS1123_SUBDOMAIN_RE: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


def is_valid_annotation_key(key: str) -> bool:
    """Whether the API server accepts `key` as an annotation key (ValidateAnnotations).

    A qualified name: an optional DNS-1123 subdomain prefix (at most 253 chars) and '/', then a name
    part (see `is_valid_qualified_name_part`). Kubernetes lower-cases annotation keys before this
    check, so capitals are fine in the prefix too.
    """
    lowered = key.lower()
    prefix, slash, name = lowered.rpartition("/")
    if slash and (
        "/" in prefix
        or len(prefix) > _DNS1123_SUBDOMAIN_MAX_LENGTH
        or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix)
    ):
        return False
    return is_valid_qualified_name_part(name)
