"""Running TE's real Python code with an emulated architecture (the emulated-kernels issue).

So far: :mod:`~memaudit.te.emulate.gates`, the capability gates as an emulated architecture sees
them. Kernel stand-ins are not built yet; nothing here replaces a kernel.
"""
