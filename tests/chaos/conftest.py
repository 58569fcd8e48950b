"""The chaos test runs on a private Postgres cluster, like the fault tests: its server holds
many connections, and a shared server's connection limit would fail turns for another reason.
"""

from tests.faults.conftest import cluster, cluster_url

__all__ = ["cluster", "cluster_url"]
