"""The turn and its steps: the turn workflow (``workflow``), its model step and the one its
opening starts early (``model_step``, ``first_model_step``), the steps after the model call
(``result_steps``, ``server_tool``, ``children``), its park on client calls and the wake-up
that ends one (``park``, ``wake``), a batch continued by whoever runs it (``batch_job``), the
hibernation that ends a workflow parked past its hot window (``hibernation``), and a turn's
outcomes, failures and deltas as values (``outcomes``, ``failure``, ``deltas``, ``resolve``).

May import: ``_notifications``, ``_commits`` and the runtime's base. What the turn calls in
the rooms above (a companion tool, the parent's wake-up at a turn's end) it finds in
``_context.rooms``, never by import.
"""
