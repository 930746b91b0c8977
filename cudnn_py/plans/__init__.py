"""Planning and execution on the cuDNN side: heuristics, engine configs, execution plans, workspace, and the
variant-pack binding that runs a plan. ``BackendGraph`` (in ``backend_graph``) ties them to a ``pygraph``."""
