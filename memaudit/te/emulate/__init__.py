"""TE's real Python code on an emulated machine, with kernel stand-ins (``--kernels emulated``).

``gates`` (the capability gates as an emulated architecture sees them), ``kernels`` (every
``tex`` entry point guarded: a stand-in, a real kernel or an error naming it), ``standins`` and
``cudnn`` (what TE's C++ and the cuDNN-frontend wrappers allocate), ``context`` (all of it around
one forward: versions, the ``cudnn`` module, the fused op's caches and registration) and ``run``
(one case: the kernel policy and its :class:`~memaudit.report.Emulation` label).
"""
