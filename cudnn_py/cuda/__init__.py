"""The CUDA driver calls: the context of each cuDNN call (``context.py``), stream capture for replaying an
execute (``capture.py``, ``graph_memsets.py``), and how the driver is reached (``driver.py``: cuda.bindings, and
the raw ctypes calls that stay raw with their measured reasons). Below the raw cuDNN layer (``backend``), which
it knows nothing of. Imports nothing here: ``import cudnn_py`` stays lazy."""
