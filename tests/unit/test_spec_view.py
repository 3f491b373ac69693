"""The launcher renderer reads a VMI through its typed spec view (util/vmispecview.py), which a
VmiView reads from the object at the first render (launcher/vmiview.py SpecReader)."""

from __future__ import annotations

import copy

import pytest
from harvester_quota.util.launcher import LauncherSettings, as_view, spec_of, target_quota_usage
from harvester_quota.util.resourcequota.planviews import vmi_facts
from harvester_quota.util.vmispecview import spec_view

from tests.objects import vmi

SETTINGS = LauncherSettings(kubevirt_version="1.6", ratio="1.5")


def test_a_malformed_spec_is_adapted_and_refused_at_every_render() -> None:
    """Abuse: a tenant writes a non-integer CPU count. The adapter never raises (the view's
    other facts still serve the room model); each render raises the same ValueError, never
    another exception and never a render from a half-read spec."""
    bad = vmi("vm1")
    bad["spec"]["domain"]["cpu"]["sockets"] = "many"
    view = as_view(bad)
    assert view.name == "vm1"
    for _ in range(2):
        with pytest.raises(ValueError, match="sockets must be an integer"):
            target_quota_usage(view, SETTINGS)


def test_a_view_renders_the_spec_it_read_not_a_later_write_to_the_object() -> None:
    """The spec is read once, at the first render, and kept: a later change of the dict the
    view came from does not change what the view renders."""
    instance = vmi("vm1", cores=2)
    view = as_view(instance)
    first = target_quota_usage(view, SETTINGS)
    instance["spec"]["domain"]["cpu"]["cores"] = 64
    assert target_quota_usage(view, SETTINGS) == first
    assert spec_of(view) is spec_of(view)


def test_rendering_leaves_the_views_resource_lists_as_they_were() -> None:
    """compute.py copies the VMI's own limits and requests before it adds overhead and devices
    to them: the view (shared by every render of the VMI) keeps the VMI's values."""
    spec = spec_view(vmi("vm1"))
    limits, requests = dict(spec.resources.limits), dict(spec.resources.requests)
    first = target_quota_usage(spec, SETTINGS)
    assert target_quota_usage(spec, SETTINGS) == first
    assert (dict(spec.resources.limits), dict(spec.resources.requests)) == (limits, requests)


def test_the_controllers_narrow_view_has_no_spec_to_render() -> None:
    """The controller's caches keep no spec (planviews.RenderedUsages renders from the store):
    rendering the narrow view itself is a clear error, not a render of nothing."""
    with pytest.raises(ValueError, match="only its narrow view"):
        target_quota_usage(vmi_facts(vmi("vm1")), SETTINGS)


@pytest.mark.parametrize("version", ["1.1", "1.6"])
def test_a_malformed_field_is_refused_whichever_version_reads_it(version: str) -> None:
    """The view is read whole: spec.architecture of the wrong type is refused for v1.1 too,
    which never sizes for it (virt-api refuses such a VMI on every version)."""
    bad = copy.deepcopy(vmi("vm1"))
    bad["spec"]["architecture"] = 5
    with pytest.raises(ValueError, match=r"spec\.architecture must be a string"):
        target_quota_usage(bad, LauncherSettings(kubevirt_version=version))
