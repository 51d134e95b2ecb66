"""The optional CPU fast path (Linux): OpenBLAS ahead of MLX, native kernels, patched layers.

Nothing here runs on Metal or CUDA. The native code in ``csrc/`` is built by
``python -m mlx_notebook.cpu build`` (run by ``scripts/setup.sh``) or at the first
CPU model load, never at import.
"""
