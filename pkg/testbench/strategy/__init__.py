"""Other algorithms that keep ResourceQuotas and migrations in step, run instead of our controllers.

A scenario can be played with our controllers (`harvester_quota.app.ControllerApp`) or with a strategy from
here, and the two runs compared: quota writes, refused target pods, hard left above the base. A
strategy has ControllerApp's shape: `await start()`, `ready()`, `await stop()`, plus `writes`, the
ResourceQuota writes per namespace.

- `harvester_quota.testbench.strategy.harvester.HarvesterStrategy`: Harvester v1.9's own controllers, failures included.
"""
