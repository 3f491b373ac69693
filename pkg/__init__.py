"""harvester-quota: keeps ResourceQuotas from blocking KubeVirt live migrations.

The tree mirrors Harvester's Go layout (``pkg/controller``, ``pkg/webhook``, ``pkg/util``) so that a
Go file has an obvious Python twin; ``pkg/generic`` stands in for wrangler/lasso and client-go.
"""

__version__ = "0.1.0"
