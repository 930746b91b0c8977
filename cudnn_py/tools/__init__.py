"""Tools over the raw layer, for debugging and bug reports: replaying a backend-call trace in a child process
(``trace_replay.py``) and summarizing one (``trace_summary.py``). Trace *recording* is the raw layer's own
(``backend/trace.py``: every backend call checks it). Used by the CLI; imports nothing here."""
