"""Classification: what each saved buffer is. ``torch`` for plain tensors, ``te`` for TE storages."""
