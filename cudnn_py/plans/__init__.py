"""Planning and execution on the cuDNN side: the planning session (``session``) with its explicit phase, and the
pieces it drives - heuristics, engine configs, execution plans, workspace, and the variant-pack binding that runs
a plan (``execute``)."""
