"""What TE says about this machine and what answers a recipe here: recipe names and alignments
(``recipes``), TE's own probes (``probes``, ``availability``), the fallback (``fallback``), the
doctor section (``doctor``), TE's versions (``environment``), and failures traced to suspected TE
bugs (``suspected``)."""
