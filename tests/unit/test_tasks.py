"""generic/tasks.py: a stopping component's tasks all end, and none of their failures escape."""

from __future__ import annotations

import asyncio

from harvester_quota.generic.tasks import cancel_and_wait


async def test_cancel_and_wait_ends_every_task_and_swallows_their_failures() -> None:
    forever = asyncio.ensure_future(asyncio.Event().wait())
    failing_on_cancel = asyncio.ensure_future(_raise_when_cancelled())
    finished = asyncio.ensure_future(asyncio.sleep(0, result="kept"))
    await finished
    await asyncio.sleep(0)  # let the others reach their first await

    await cancel_and_wait([forever, failing_on_cancel, finished])

    assert forever.cancelled()
    assert isinstance(failing_on_cancel.exception(), RuntimeError)
    assert finished.result() == "kept"


async def _raise_when_cancelled() -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        raise RuntimeError("failed while stopping") from None
