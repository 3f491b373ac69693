"""A leader-election candidate run as its own process by the handover test.

Prints "OBSERVED <holder>" each time it sees a new leader, "LEADING <identity> <t>" when it
wins and "STOPPED-LEADING <identity> <t>" when it stops acting as the leader (t: the system's
monotonic clock, comparable between processes on one machine); SIGTERM makes it release the lease and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time

from harvester_quota.generic import config
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.leader import LeaderElectionConfig, LeaderElector


async def main(args: argparse.Namespace) -> None:
    async with ApiClient(config.load(args.kubeconfig)) as client:

        async def lead() -> None:
            print(f"LEADING {args.identity} {time.monotonic():.3f}", flush=True)
            await asyncio.Future()

        elector = LeaderElector(
            client,
            LeaderElectionConfig(
                "default",
                args.lease,
                args.identity,
                lease_duration=6,
                renew_deadline=4,
                retry_period=1,
            ),
            on_started_leading=lead,
            on_new_leader=lambda holder: print(f"OBSERVED {holder}", flush=True),
            on_stopped_leading=lambda: print(
                f"STOPPED-LEADING {args.identity} {time.monotonic():.3f}", flush=True
            ),
        )
        task = asyncio.ensure_future(elector.run())
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        print(f"STOPPED {args.identity}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    asyncio.run(main(parser.parse_args()))
