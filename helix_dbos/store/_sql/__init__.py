"""Each backend's SQL, by name, and the few things it does its own way: one module per backend.

``postgres.py`` and ``sqlite.py`` each define one backend class with the same members
(``dialect.Backend`` says what each is); ``dialect.backend_for`` picks one when a store is
made. A statement that is the same on both backends stays in the module that runs it.
"""
