"""The turn and its steps: the turn workflow (``workflow``), its steps (``steps``: the model
step, then answer reads, the results commit and the end), the model step its opening starts
early (``first_model_step``), a server tool's run and a sub-agent call (``server_tool``,
``children``), its park on client calls and the wake-up
that ends one (``park``, ``wake``), a batch continued by whoever runs it (``batch_job``), the
hibernation that ends a workflow parked past its hot window (``hibernation``), and a turn's
outcomes, failures and deltas as values (``outcomes``, ``failure``, ``deltas``, ``resolve``).

May import: ``_notifications``, ``_commits`` and the runtime's base. What the turn calls in
the rooms above (a companion tool, the parent's wake-up at a turn's end) it finds in
``_context.rooms``, never by import.
"""
