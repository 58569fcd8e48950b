"""The names DBOS registers once every module of the runtime is imported: moving a workflow or
a step to another module must not change them (each is given its name explicitly)."""

from __future__ import annotations

import json
import subprocess
import sys

#: Every workflow, and every step (DBOS registers a step as ``<temp>.`` + its name), by name.
REGISTERED = [
    "<temp>.helix.companion.op",
    "<temp>.helix.companion.send",
    "<temp>.helix.companion.wake_parent",
    "<temp>.helix.lifecycle.apply",
    "<temp>.helix.persistent.hibernate",
    "<temp>.helix.turn.child_ended",
    "<temp>.helix.turn.collect_answers",
    "<temp>.helix.turn.commit_results",
    "<temp>.helix.turn.finish",
    "<temp>.helix.turn.server_tool",
    "<temp>.helix.turn.start_child",
    "helix.lifecycle",
    "helix.persistent",
    "helix.turn",
    "helix.turn.continue",
]


#: Run in a fresh interpreter: the tests register workflows and steps of their own.
_LIST = """
import importlib, json, pkgutil
import helix_dbos.runtime
for module in pkgutil.walk_packages(helix_dbos.runtime.__path__, "helix_dbos.runtime."):
    importlib.import_module(module.name)
from dbos._dbos import _get_or_create_dbos_registry
print(json.dumps(sorted(_get_or_create_dbos_registry().workflow_info_map)))
"""


def test_the_registered_workflow_and_step_names_are_pinned() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _LIST], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert json.loads(out.splitlines()[-1]) == REGISTERED
