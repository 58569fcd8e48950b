"""The turn and its steps: the turn workflow (``workflow``), its model step and the step that
may start it early (``model_step``, ``first_model_step``), the steps after the model call
(``result_steps``, ``server_tool``, ``children``), its park on client calls and the wake-up
that ends it (``park``, ``wake``), a batch continued by whoever runs it (``batch_job``), and
the hibernation that ends a workflow parked past its hot window (``hibernation``).

May import: ``notifications``, ``commits`` and the runtime's base. What the turn calls in the
rooms above (a companion tool, the parent's wake-up at a turn's end) it finds through the
context's registry (``context.Workflows``), never by import.
"""
