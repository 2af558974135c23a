"""What TE's objects are at the hook: its storage objects and buffers (``classify``, ``layout``), the
grouped MLP's operand roles (``roles``), and what each TE kernel entry point reads (``reads``)."""
